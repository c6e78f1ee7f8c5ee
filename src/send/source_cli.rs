//! sbm-send's source flags (`-b`, `--fps` and the frame options, `--render`) and their
//! conversion into a [`SourceSpec`].

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::source::{FrameClock, RenderRate, SizeModel, SourceSpec, StalePolicy, MIN_FRAME};
use crate::units;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StaleArg {
    /// Write every frame, in order.
    Queue,
    /// Drop frames whose writing has not started when a newer one is ready (counted).
    Latest,
}

/// How frame sizes vary around --frame-size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FrameDist {
    Fixed,
    /// ± this fraction of the mean, uniformly.
    Uniform(f64),
    Exponential,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Application-limited sources (default: bulk, always a write ready)")]
pub struct SourceArgs {
    /// Paced source, iperf's -b: write-size chunks generated at RATE (e.g. 1.5mbit), each
    /// waiting in the application until the socket invites a write. Writes stay one per
    /// invitation; the per-chunk content age goes to frames.csv.
    #[arg(short = 'b', long = "bitrate", value_parser = parse_rate, value_name = "RATE", conflicts_with_all = ["fps", "paced_start"])]
    pub bitrate: Option<u64>,

    /// Frame source: one frame every 1/FPS (e.g. 30, 29.97), each one write of its own size
    /// and one trip-times message carrying its content time (implies --trip-times). With
    /// --render: at most FPS frames per second.
    #[arg(long, value_parser = parse_fps, value_name = "FPS", conflicts_with = "paced_start")]
    pub fps: Option<f64>,

    /// Size of every frame, or the mean for --frame-dist uniform/exp; with --render, the
    /// first frame's size until the kernel has a delivery-rate sample (default 4KiB).
    #[arg(long, value_parser = parse_frame_size, value_name = "BYTES", requires = "fps")]
    pub frame_size: Option<u32>,

    /// How frame sizes vary around --frame-size: fixed, uniform:PCT (± PCT % of the mean,
    /// uniformly) or exp (exponential, capped at 8 × the mean). Drawn from --seed.
    #[arg(long, default_value = "fixed", value_parser = parse_frame_dist, value_name = "DIST", requires = "frame_size")]
    pub frame_dist: FrameDist,

    /// Frame sizes from FILE: one size per line (bytes, or with a unit), '#' starts a
    /// comment; used in order and repeated.
    #[arg(long, value_name = "FILE", requires = "fps", conflicts_with_all = ["frame_size", "render"])]
    pub frame_sizes: Option<PathBuf>,

    /// Frames not yet being written when a newer one is ready: queue (write every frame,
    /// in order) or latest (drop them, counted as stale).
    #[arg(long, value_enum, default_value_t = StaleArg::Queue, value_name = "POLICY", requires = "fps", conflicts_with = "render")]
    pub stale: StaleArg,

    /// Render on invitation: no frame exists until the socket invites a write; then one is
    /// made (at most one per 1/FPS) sized RATE × the time since the previous frame. RATE is
    /// a target rate (e.g. 1.5mbit) or `delivery` (the kernel's delivery-rate estimate).
    #[arg(long, value_parser = parse_render, value_name = "RATE|delivery", requires = "fps")]
    pub render: Option<RenderRate>,

    /// The largest rendered frame.
    #[arg(long, default_value = "1MiB", value_parser = parse_frame_size, value_name = "BYTES", requires = "render")]
    pub frame_cap: u32,

    /// Seed of the frame-size draws: the same seed draws the same sizes.
    #[arg(long, default_value_t = 1, value_name = "N", requires = "frame_size")]
    pub seed: u64,
}

/// The render's first frame without a delivery-rate sample, unless --frame-size says.
const RENDER_FIRST: u32 = 4096;

impl SourceArgs {
    /// The source asked for (None: bulk).
    pub fn spec(&self, write_size: u32) -> Result<Option<SourceSpec>, String> {
        if let Some(rate_bps) = self.bitrate {
            return Ok(Some(SourceSpec::Paced {
                rate_bps,
                chunk: write_size,
            }));
        }
        let Some(fps) = self.fps else {
            return Ok(None);
        };
        let clock = FrameClock::fps_clock(fps)
            .ok_or_else(|| format!("invalid --fps {fps}: from 0.001 to 10^9"))?;
        if let Some(rate) = self.render {
            let first = self.frame_size.unwrap_or(RENDER_FIRST);
            return Ok(Some(SourceSpec::Render {
                clock,
                rate,
                first: first.min(self.frame_cap),
                cap: self.frame_cap,
            }));
        }
        let sizes = match (&self.frame_sizes, self.frame_size) {
            (Some(path), _) => SizeModel::Listed(read_sizes(path)?),
            (None, Some(mean)) => match self.frame_dist {
                FrameDist::Fixed => SizeModel::Fixed(mean),
                FrameDist::Uniform(spread) => SizeModel::Uniform { mean, spread },
                FrameDist::Exponential => SizeModel::Exponential { mean },
            },
            (None, None) => return Err(
                "--fps needs frame sizes: --frame-size BYTES, --frame-sizes FILE or --render RATE"
                    .into(),
            ),
        };
        Ok(Some(SourceSpec::Frames {
            clock,
            sizes,
            stale: match self.stale {
                StaleArg::Queue => StalePolicy::Queue,
                StaleArg::Latest => StalePolicy::Latest,
            },
            seed: self.seed,
        }))
    }
}

fn parse_rate(s: &str) -> Result<u64, String> {
    match units::parse_rate_bps(s) {
        Ok(0) => Err(format!("invalid rate '{s}': must be greater than zero")),
        Ok(r) => Ok(r),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_fps(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.001..=1e9).contains(&v) => Ok(v),
        _ => Err(format!(
            "invalid frame rate '{s}': frames per second from 0.001 to 10^9 (e.g. 30, 29.97)"
        )),
    }
}

/// Frames are messages with the trip-times header: at least 32 bytes; at most 1 GiB.
fn parse_frame_size(s: &str) -> Result<u32, String> {
    let v = units::parse_bytes(s).map_err(|e| e.to_string())?;
    if v < u64::from(MIN_FRAME) || v > 1 << 30 {
        return Err(format!(
            "invalid frame size '{s}': from {MIN_FRAME} B (the trip-times header) to 1GiB"
        ));
    }
    Ok(v as u32)
}

fn parse_frame_dist(s: &str) -> Result<FrameDist, String> {
    let bad = || {
        format!(
            "invalid frame size distribution '{s}': fixed, uniform:PCT (e.g. uniform:25%) or exp"
        )
    };
    match s.trim() {
        "fixed" => Ok(FrameDist::Fixed),
        "exp" | "exponential" => Ok(FrameDist::Exponential),
        other => {
            let pct = other.strip_prefix("uniform:").ok_or_else(bad)?;
            let v: f64 = pct
                .trim_end_matches('%')
                .trim()
                .parse()
                .map_err(|_| bad())?;
            if !(0.0..100.0).contains(&v) {
                return Err(format!(
                    "invalid frame size distribution '{s}': the spread is from 0 to under 100 %"
                ));
            }
            Ok(FrameDist::Uniform(v / 100.0))
        }
    }
}

fn parse_render(s: &str) -> Result<RenderRate, String> {
    if s.trim() == "delivery" {
        return Ok(RenderRate::DeliveryRate);
    }
    parse_rate(s)
        .map(RenderRate::Target)
        .map_err(|e| format!("{e} (--render takes a rate or 'delivery')"))
}

/// Sizes from a file: one per line, '#' comments; one clear error naming the line.
fn read_sizes(path: &std::path::Path) -> Result<Vec<u32>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--frame-sizes {}: {e}", path.display()))?;
    let mut sizes = vec![];
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let v = parse_frame_size(line)
            .map_err(|e| format!("--frame-sizes {} line {}: {e}", path.display(), i + 1))?;
        sizes.push(v);
    }
    if sizes.is_empty() {
        return Err(format!(
            "--frame-sizes {}: no sizes in the file",
            path.display()
        ));
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distributions_and_render_rates_parse() {
        assert_eq!(parse_frame_dist("fixed"), Ok(FrameDist::Fixed));
        assert_eq!(
            parse_frame_dist("uniform:25%"),
            Ok(FrameDist::Uniform(0.25))
        );
        assert_eq!(parse_frame_dist("exp"), Ok(FrameDist::Exponential));
        for bad in [
            "uniform",
            "uniform:x",
            "uniform:100%",
            "normal",
            "uniform:-5",
        ] {
            assert!(parse_frame_dist(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_render("delivery"), Ok(RenderRate::DeliveryRate));
        assert_eq!(parse_render("1.5mbit"), Ok(RenderRate::Target(1_500_000)));
        assert!(parse_render("fast").is_err());
        assert!(parse_fps("0").is_err() && parse_fps("nan").is_err());
        assert!(parse_frame_size("31").is_err());
    }

    #[test]
    fn size_files_name_the_bad_line() {
        let dir = std::env::temp_dir().join(format!("sbm-sizes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good");
        std::fs::write(&good, "# sizes\n1000\n\n2KiB  # a comment\n").unwrap();
        assert_eq!(read_sizes(&good), Ok(vec![1000, 2048]));
        let bad = dir.join("bad");
        std::fs::write(&bad, "1000\nten\n").unwrap();
        let e = read_sizes(&bad).unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        std::fs::write(&bad, "# nothing\n").unwrap();
        assert!(read_sizes(&bad).unwrap_err().contains("no sizes"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
