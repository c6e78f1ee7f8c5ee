// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * TCP_REPLENISH_TIME on a stock kernel: a sock_ops program that keeps each socket's
 * TCP_NOTSENT_LOWAT tied to drain rate x T, for every TCP socket created in the cgroup
 * it is attached to (sbm-send's own, or an unmodified program's).
 *
 * Why a lowat and not a readiness decision: a BPF program cannot change what poll()
 * answers, but Linux answers it from NOTSENT_LOWAT — writable while notsent < lowat/2
 * (sk_stream_is_writeable, wake=1), and sendmsg() accepts data until notsent >= lowat.
 * So lowat = 2 x rate x T makes the socket writable below the rule's threshold rate x T,
 * and lowat = rate x T below half of it (the patched kernel's one test, v2). Unlike the
 * draft's option, a lowat also gates sendmsg: it is not notification-only.
 *
 * The drain rate follows the report's section 3 and sbm's `delivery` estimator: the
 * latest delivery-rate sample; an application-limited sample only when it is higher than
 * the estimate; before the first sample cwnd x mss / srtt. Samples above what the
 * congestion window could deliver in one minimum RTT (twice cwnd x mss / min_rtt) are
 * dropped: the first ACK was measured here at 46 Gb/s on a 20 Mb/s path.
 *
 * Updated on BPF_SOCK_OPS_RTT_CB (about once per RTT, measured; it runs before the ACK's
 * own rate sample is taken, so the rate it sees is one ACK old).
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#define SOL_TCP 6
#define TCP_NOTSENT_LOWAT 25
#define TCP_NAGLE_OFF 1
#define USEC_PER_SEC 1000000ULL
/* Largest lowat the kernel stores (an int). */
#define LOWAT_MAX 0x7fffffffULL

/* Only the fields read here; CO-RE finds them in the running kernel's struct tcp_sock. */
struct minmax_sample___sbm {
	__u32 t;
	__u32 v;
} __attribute__((preserve_access_index));

struct minmax___sbm {
	struct minmax_sample___sbm s[3];
} __attribute__((preserve_access_index));

struct tcp_sock___sbm {
	struct minmax___sbm rtt_min;
	__u8 rate_app_limited:1;
	__u8 nonagle:4;
} __attribute__((preserve_access_index));

/* Set by userspace before attaching; read-only after (index 0). */
struct sbm_config {
	__u64 time_us;		/* T */
	__u32 lowat_per_threshold; /* 2: wake at rate x T; 1: wake at half of it */
	__u32 sub_mss_clause;	/* writable while notsent < mss: 0 never, 1 with Nagle on, 2 always */
	__u16 port;		/* 0: every connection; else only this remote port */
	__u16 pad[3];
};

/* Per socket; userspace reads it with the socket's fd as key (sbm-send's intervals). */
struct sbm_state {
	__u64 rate_Bps;		/* estimate in use (0: none yet) */
	__u64 threshold;	/* rate x T, bytes, as last computed */
	__u32 lowat;		/* TCP_NOTSENT_LOWAT as last set */
	__u32 source;		/* 1 sample, 2 app-limited sample, 3 cwnd/srtt */
	__u64 updates;		/* lowat computations */
	__u64 samples;		/* rate samples seen */
	__u64 app_limited_skipped; /* app-limited samples below the estimate */
	__u64 spikes_dropped;	/* samples above 2 x cwnd x mss / min_rtt */
	__u64 setsockopt_errors;
	__s32 last_error;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sbm_config);
} sbm_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sbm_state);
} sbm_state SEC(".maps");

enum { SRC_SAMPLE = 1, SRC_APP_LIMITED = 2, SRC_CWND_SRTT = 3 };

static __always_inline __u64 per_second(__u64 bytes, __u64 us)
{
	return us ? bytes * USEC_PER_SEC / us : 0;
}

static __always_inline void update(struct bpf_sock_ops *skops, struct bpf_sock *sk,
				   struct sbm_state *st, const struct sbm_config *cfg)
{
	struct tcp_sock___sbm *tp;
	__u64 mss = skops->mss_cache, cwnd = skops->snd_cwnd;
	__u64 srtt_us = skops->srtt_us >> 3;
	__u64 sample, bound, rate, threshold, lowat;
	__u32 min_rtt_us = 0, source = st->source;
	int app_limited = 0, nagle = 1;
	long err;

	tp = (struct tcp_sock___sbm *)bpf_skc_to_tcp_sock(sk);
	if (tp) {
		min_rtt_us = tp->rtt_min.s[0].v;
		app_limited = BPF_CORE_READ_BITFIELD_PROBED(tp, rate_app_limited);
		nagle = !(BPF_CORE_READ_BITFIELD_PROBED(tp, nonagle) & TCP_NAGLE_OFF);
	}

	rate = st->rate_Bps;
	if (skops->rate_delivered && skops->rate_interval_us) {
		st->samples++;
		sample = per_second((__u64)skops->rate_delivered * mss, skops->rate_interval_us);
		bound = min_rtt_us ? 2 * per_second(cwnd * mss, min_rtt_us) : 0;
		if (bound && sample > bound) {
			st->spikes_dropped++;
		} else if (app_limited && sample <= rate) {
			st->app_limited_skipped++;
		} else {
			rate = sample;
			source = app_limited ? SRC_APP_LIMITED : SRC_SAMPLE;
		}
	}
	st->rate_Bps = rate;
	if (!rate) {
		rate = per_second(cwnd * mss, srtt_us);
		source = SRC_CWND_SRTT;
	}
	if (!rate)
		return;
	st->source = source;

	threshold = rate * cfg->time_us / USEC_PER_SEC;
	lowat = threshold * cfg->lowat_per_threshold;
	/* Linux wakes at lowat/2: at least 2 so that an empty buffer is writable. */
	if (lowat < 2)
		lowat = 2;
	/* Section 6: with Nagle on, a sub-MSS threshold would hold the tail of every write
	 * behind an unacknowledged small segment; writable while notsent < mss instead. */
	if ((cfg->sub_mss_clause == 2 || (cfg->sub_mss_clause == 1 && nagle)) &&
	    lowat < 2 * mss)
		lowat = 2 * mss;
	if (lowat > LOWAT_MAX)
		lowat = LOWAT_MAX;
	st->threshold = threshold;
	st->updates++;
	if (lowat == st->lowat)
		return;
	int v = (int)lowat;
	err = bpf_setsockopt(skops, SOL_TCP, TCP_NOTSENT_LOWAT, &v, sizeof(v));
	if (err) {
		st->setsockopt_errors++;
		st->last_error = (__s32)err;
		return;
	}
	st->lowat = (__u32)lowat;
}

SEC("sockops")
int sbm_replenish(struct bpf_sock_ops *skops)
{
	__u32 zero = 0;
	struct sbm_config *cfg;
	struct sbm_state *st;
	struct bpf_sock *sk;

	cfg = bpf_map_lookup_elem(&sbm_config, &zero);
	if (!cfg || !cfg->time_us)
		return 1;
	sk = skops->sk;
	if (!sk)
		return 1;

	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		/* remote_port is in network byte order in its upper 16 bits' place. */
		if (cfg->port && bpf_ntohl(skops->remote_port) != cfg->port &&
		    skops->local_port != cfg->port)
			return 1;
		st = bpf_sk_storage_get(&sbm_state, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!st)
			return 1;
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
						 BPF_SOCK_OPS_RTT_CB_FLAG);
		update(skops, sk, st, cfg);
		break;
	case BPF_SOCK_OPS_RTT_CB:
		st = bpf_sk_storage_get(&sbm_state, sk, 0, 0);
		if (st)
			update(skops, sk, st, cfg);
		break;
	}
	return 1;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
