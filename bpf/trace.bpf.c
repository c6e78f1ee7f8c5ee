// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * sbm-trace: per-write source-buffer timing of any program's TCP connections, from a
 * sock_ops program attached to the cgroup the program runs in. No socket option is set
 * by the traced program; everything comes from callbacks:
 *
 * - BPF TX timestamping (Linux 6.15+): SK_BPF_CB_FLAGS = SK_BPF_CB_TX_TIMESTAMPING on the
 *   connection makes every sendmsg() that queued data call TSTAMP_SENDMSG_CB with the
 *   write's last skb; bpf_sock_ops_enable_tx_tstamp() marks that skb, whose key (tskey)
 *   is then the sequence number of the write's last byte, and SCHED, SND_SW and ACK
 *   callbacks follow with that skb. As with SO_TIMESTAMPING, a later write appended to
 *   the same skb overwrites the key: the earlier write is timed by the later one's
 *   reports (sbm's "coalesced").
 * - Per packet: with BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG, HDR_OPT_LEN_CB runs for every
 *   outgoing segment (retransmissions too) with its skb; the first time a segment's end_seq
 *   passes the highest sent so far, the bytes up to it have left the socket for IP: the
 *   exact departure of every byte, no coalescing.
 *
 * Events go to userspace through a ring buffer; sequence numbers are raw (userspace
 * subtracts the connection's first data sequence number).
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#define SOL_SOCKET 1
#define SBM_SOL_TCP 6
#define SBM_TCP_CONGESTION 13
/* Linux 6.15 uapi, absent from older headers: under sbm's own names. */
#define SBM_SK_BPF_CB_FLAGS 1009
#define SBM_SK_BPF_CB_TX_TIMESTAMPING 1
#define SBM_TSTAMP_SCHED_CB 16
#define SBM_TSTAMP_SND_SW_CB 17
#define SBM_TSTAMP_SND_HW_CB 18
#define SBM_TSTAMP_ACK_CB 19
#define SBM_TSTAMP_SENDMSG_CB 20

/* The kernel's types, only the fields read (CO-RE relocates them). */
struct sk_buff___sbm {
	unsigned char *head;
	unsigned int end;
	char cb[48];
} __attribute__((preserve_access_index));

/* snd_nxt and snd_una from the socket itself: the sock_ops context's copies read 0 in the
 * TX timestamping callbacks (measured). */
struct tcp_sock___sbm {
	__u32 snd_nxt;
	__u32 snd_una;
} __attribute__((preserve_access_index));

struct skb_shared_info___sbm {
	__u8 tx_flags;
	__u32 tskey;
} __attribute__((preserve_access_index));

/* The skb's software TX timestamp requests: SKBTX_SW_TSTAMP, SKBTX_SCHED_TSTAMP and
 * (6.15+) SKBTX_BPF, as include/linux/skbuff.h numbers them. */
#define SBM_SKBTX_SW_STAMPS ((1 << 1) | (1 << 6) | (1 << 7))

/* Under the kernel's own name: libbpf matches the kfunc's prototype by the names of its
 * argument types, and a forward declaration does not match a struct. */
struct bpf_sock_ops_kern {
	struct sk_buff___sbm *skb;
} __attribute__((preserve_access_index));

extern void *bpf_cast_to_kern_ctx(void *) __ksym;
extern void *bpf_rdonly_cast(const void *, __u32) __ksym;
extern int bpf_sock_ops_enable_tx_tstamp(struct bpf_sock_ops_kern *skops,
					 __u64 flags) __ksym __weak;

/* The reader reads the ring on its own schedule (sbm-send's loop on its turns, sbm-trace
 * every poll interval): no event wakes it. A wakeup is irq_work's self-interrupt in the
 * sending task, an APIC write that took a third of a VM's sender CPU (measured, perf). */
#define SBM_NO_WAKEUP 1
/* The reader records its writes itself (sbm-send): no write events. */
#define SBM_NO_WRITES 2

struct sbm_trace_config {
	__u16 port;		/* 0: every connection; else only this local or remote port */
	__u16 timestamping;	/* 1: BPF TX timestamping (needs 6.15+) */
	__u16 per_packet;	/* 1: a departure per segment (the header-option callback) */
	__u16 flags;		/* SBM_NO_WAKEUP, SBM_NO_WRITES */
	char cc[16];		/* "": leave it; else each connection's congestion control */
};

enum sbm_event_kind {
	EV_ESTABLISHED = 1,	/* seq: first data sequence number; addresses set; aux: setting
				 * the configured congestion control failed with this error */
	EV_WRITE = 2,		/* seq: the write's end (last byte + 1) */
	EV_SCHED = 3,		/* seq: tskey (the last byte of the write that last touched the skb) */
	EV_SND = 4,
	EV_ACK = 5,
	EV_DEPART = 6,		/* seq: end_seq of a segment that advanced the highest sent */
	EV_CLOSED = 7,
	EV_NO_TSTAMP = 8,	/* enabling BPF TX timestamping failed: aux = error */
	EV_DISPLACED = 9,	/* a segment left carrying a timestamp request whose key byte it
				 * does not hold: seq = the key, aux = the segment's first
				 * byte minus the key */
};

struct sbm_event {
	__u64 cookie;
	__u64 time_ns;		/* CLOCK_MONOTONIC */
	__u32 kind;
	__u32 seq;
	__u32 snd_nxt;
	__u32 snd_una;
	__s32 aux;
	__u16 local_port;
	__u16 remote_port;
	__u32 family;
	__u32 local_ip[4];
	__u32 remote_ip[4];
};

struct sbm_conn {
	__u32 max_end;		/* highest end_seq sent */
	__u32 started;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sbm_trace_config);
} sbm_trace_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sbm_conn);
} sbm_conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} sbm_events SEC(".maps");

/* Events that found the ring buffer full (index 0), read by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sbm_lost SEC(".maps");

static __always_inline int emit(const struct sbm_trace_config *cfg, struct bpf_sock_ops *skops,
				struct bpf_sock *sk, __u32 kind, __u32 seq, __s32 aux)
{
	struct tcp_sock___sbm *tp = (struct tcp_sock___sbm *)bpf_skc_to_tcp_sock(sk);
	struct sbm_event *e = bpf_ringbuf_reserve(&sbm_events, sizeof(*e), 0);
	__u32 zero = 0;
	__u64 *lost;

	if (!e) {
		lost = bpf_map_lookup_elem(&sbm_lost, &zero);
		if (lost)
			__sync_fetch_and_add(lost, 1);
		return -1;
	}
	e->cookie = bpf_get_socket_cookie(skops);
	e->time_ns = bpf_ktime_get_ns();
	e->kind = kind;
	e->seq = seq;
	e->snd_nxt = tp ? tp->snd_nxt : 0;
	e->snd_una = tp ? tp->snd_una : 0;
	e->aux = aux;
	e->local_port = (__u16)skops->local_port;
	e->remote_port = bpf_ntohl(skops->remote_port);
	e->family = skops->family;
	__builtin_memset(e->local_ip, 0, sizeof(e->local_ip));
	__builtin_memset(e->remote_ip, 0, sizeof(e->remote_ip));
	if (kind == EV_ESTABLISHED && skops->family == 10 /* AF_INET6 */) {
		e->local_ip[0] = skops->local_ip6[0];
		e->local_ip[1] = skops->local_ip6[1];
		e->local_ip[2] = skops->local_ip6[2];
		e->local_ip[3] = skops->local_ip6[3];
		e->remote_ip[0] = skops->remote_ip6[0];
		e->remote_ip[1] = skops->remote_ip6[1];
		e->remote_ip[2] = skops->remote_ip6[2];
		e->remote_ip[3] = skops->remote_ip6[3];
	} else if (kind == EV_ESTABLISHED) {
		e->local_ip[0] = skops->local_ip4;
		e->remote_ip[0] = skops->remote_ip4;
	}
	bpf_ringbuf_submit(e, (cfg->flags & SBM_NO_WAKEUP) ? BPF_RB_NO_WAKEUP : 0);
	return 0;
}

/* The skb a timestamping or header-option callback runs for (NULL when there is none). */
static __always_inline struct sk_buff___sbm *callback_skb(struct bpf_sock_ops *skops)
{
	struct bpf_sock_ops_kern *k = bpf_cast_to_kern_ctx(skops);

	return k->skb;
}

static __always_inline struct skb_shared_info___sbm *skb_shinfo(struct sk_buff___sbm *skb)
{
	return bpf_rdonly_cast(skb->head + skb->end,
			       bpf_core_type_id_kernel(struct skb_shared_info___sbm));
}

static __always_inline __u32 skb_tskey(struct sk_buff___sbm *skb)
{
	return skb_shinfo(skb)->tskey;
}

SEC("sockops")
int sbm_trace(struct bpf_sock_ops *skops)
{
	struct sbm_trace_config *cfg;
	struct skb_shared_info___sbm *shinfo;
	struct sk_buff___sbm *skb;
	struct bpf_sock *sk = skops->sk;
	struct sbm_conn *c;
	__u32 zero = 0, seq, end_seq, key, remote;
	int flag, err;

	if (!sk)
		return 1;
	cfg = bpf_map_lookup_elem(&sbm_trace_config, &zero);
	if (!cfg)
		return 1;

	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		remote = bpf_ntohl(skops->remote_port);
		if (cfg->port && remote != cfg->port && skops->local_port != cfg->port)
			return 1;
		c = bpf_sk_storage_get(&sbm_conns, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!c)
			return 1;
		c->max_end = skops->snd_nxt;
		c->started = 1;
		err = 0;
		if (cfg->cc[0]) {
			char cc[16];

			__builtin_memcpy(cc, cfg->cc, sizeof(cc));
			err = bpf_setsockopt(skops, SBM_SOL_TCP, SBM_TCP_CONGESTION, cc,
					     sizeof(cc));
		}
		emit(cfg, skops, sk, EV_ESTABLISHED, skops->snd_nxt, err);
		/* The header-option callback runs for every outgoing segment: only when its
		 * departures are asked for (sbm-send's BPF timestamps alone do not need it). */
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
						 BPF_SOCK_OPS_STATE_CB_FLAG |
						 (cfg->per_packet ?
						  BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG : 0));
		if (cfg->timestamping) {
			flag = SBM_SK_BPF_CB_TX_TIMESTAMPING;
			err = bpf_setsockopt(skops, SOL_SOCKET, SBM_SK_BPF_CB_FLAGS, &flag,
					     sizeof(flag));
			if (err)
				emit(cfg, skops, sk, EV_NO_TSTAMP, 0, err);
		}
		break;
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
		c = bpf_sk_storage_get(&sbm_conns, sk, 0, 0);
		if (!c)
			return 1;
		skb = callback_skb(skops);
		if (!skb)
			return 1;
		/* struct tcp_skb_cb starts with seq and end_seq. */
		seq = *(__u32 *)&skb->cb[0];
		end_seq = *(__u32 *)&skb->cb[4];
		/* Its TX timestamps are reported for the key byte: say so when the segment that
		 * carries the request does not hold that byte (the kernel moved the byte to an
		 * earlier segment and left the request behind). */
		shinfo = skb_shinfo(skb);
		key = shinfo->tskey;
		if ((shinfo->tx_flags & SBM_SKBTX_SW_STAMPS) && end_seq != seq &&
		    key - seq >= end_seq - seq)
			emit(cfg, skops, sk, EV_DISPLACED, key, (__s32)(seq - key));
		if (end_seq == seq || (__s32)(end_seq - c->max_end) <= 0)
			return 1;
		c->max_end = end_seq;
		emit(cfg, skops, sk, EV_DEPART, end_seq, 0);
		break;
	case SBM_TSTAMP_SENDMSG_CB:
		if (!bpf_sock_ops_enable_tx_tstamp)
			return 1;
		c = bpf_sk_storage_get(&sbm_conns, sk, 0, 0);
		if (!c)
			return 1;
		skb = callback_skb(skops);
		if (!skb)
			return 1;
		bpf_sock_ops_enable_tx_tstamp(
			(struct bpf_sock_ops_kern *)bpf_cast_to_kern_ctx(skops), 0);
		if (!(cfg->flags & SBM_NO_WRITES))
			emit(cfg, skops, sk, EV_WRITE, skb_tskey(skb) + 1, 0);
		break;
	case SBM_TSTAMP_SCHED_CB:
	case SBM_TSTAMP_SND_SW_CB:
	case SBM_TSTAMP_ACK_CB:
		c = bpf_sk_storage_get(&sbm_conns, sk, 0, 0);
		if (!c)
			return 1;
		skb = callback_skb(skops);
		if (!skb)
			return 1;
		emit(cfg, skops, sk,
		     skops->op == SBM_TSTAMP_SCHED_CB ? EV_SCHED :
		     skops->op == SBM_TSTAMP_SND_SW_CB ? EV_SND : EV_ACK,
		     skb_tskey(skb), 0);
		break;
	case BPF_SOCK_OPS_STATE_CB:
		/* args[1] is the new state; BPF_TCP_CLOSE = 7. */
		if (skops->args[1] != BPF_TCP_CLOSE)
			return 1;
		c = bpf_sk_storage_get(&sbm_conns, sk, 0, 0);
		if (c)
			emit(cfg, skops, sk, EV_CLOSED, skops->snd_nxt, 0);
		break;
	}
	return 1;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
