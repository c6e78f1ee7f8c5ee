//! Embeds what the scripts need beside the binaries — the matrix presets, the kernel
//! patches and the UML config fragment — so that `cargo install --path .` gives binaries
//! that work without the source tree (src/embedded.rs writes them out when the tree is
//! gone). Generates `$OUT_DIR/embedded_files.rs`: two lists of (relative path, bytes).
//!
//! With the `bpf` feature (the default), also compiles the BPF programs in `bpf/` with clang
//! into `$OUT_DIR/NAME.bpf.o`, which src/bpf embeds and loads; without clang the build stops
//! with one line saying what to install, or how to build without them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The files directly in `dir` whose names end in `suffix`, sorted.
fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("build.rs: cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file() && p.to_string_lossy().ends_with(suffix))
        .collect();
    found.sort();
    found
}

/// A Rust list of `(relative name, include_bytes!(absolute path))`.
fn list(name: &str, root: &Path, paths: &[PathBuf]) -> String {
    let mut s = format!("pub const {name}: &[(&str, &[u8])] = &[\n");
    for p in paths {
        let rel = p.strip_prefix(root).expect("under its root");
        writeln!(
            s,
            "    ({:?}, include_bytes!({:?})),",
            rel.to_string_lossy(),
            p.to_string_lossy()
        )
        .expect("writing to a String");
    }
    s.push_str("];\n");
    s
}

/// The BPF programs, each `bpf/NAME.bpf.c` built into `$OUT_DIR/NAME.bpf.o`.
#[cfg(feature = "bpf")]
const BPF_PROGRAMS: &[&str] = &["replenish", "trace"];

#[cfg(feature = "bpf")]
fn build_bpf(manifest: &Path, out: &Path) {
    let clang = std::env::var_os("CLANG").unwrap_or_else(|| "clang".into());
    let found = std::process::Command::new(&clang)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!(
            "build.rs: the BPF programs in bpf/ need clang ({}): apt install clang libelf-dev zlib1g-dev pkg-config (or run scripts/setup), or build without them: cargo build --release --no-default-features",
            clang.to_string_lossy()
        );
        std::process::exit(1);
    }
    for name in BPF_PROGRAMS {
        let src = manifest.join(format!("bpf/{name}.bpf.c"));
        println!("cargo:rerun-if-changed={}", src.display());
        let obj = out.join(format!("{name}.bpf.o"));
        let mut b = libbpf_cargo::SkeletonBuilder::new();
        b.source(&src).obj(&obj).clang(&clang);
        // Debian keeps asm/ under the multiarch directory, which clang -target bpf does not
        // search by itself.
        let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
        let multiarch = PathBuf::from(format!("/usr/include/{arch}-linux-gnu"));
        if multiarch.is_dir() {
            b.clang_args([format!("-I{}", multiarch.display())]);
        }
        if let Err(e) = b.build() {
            eprintln!("build.rs: compiling {}: {e:#}", src.display());
            std::process::exit(1);
        }
    }
    println!("cargo:rerun-if-env-changed=CLANG");
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let presets_root = manifest.join("scripts/matrices");
    let kernel_root = manifest.join("kernel");
    let presets = files(&presets_root, ".toml");
    let mut kernel = files(&kernel_root.join("patches"), ".patch");
    kernel.push(kernel_root.join("uml.config"));
    for dir in [&presets_root, &kernel_root.join("patches")] {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    for p in presets.iter().chain(&kernel) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    let text = list("PRESETS", &presets_root, &presets) + &list("KERNEL", &kernel_root, &kernel);
    std::fs::write(out.join("embedded_files.rs"), text).expect("OUT_DIR is writable");
    #[cfg(feature = "bpf")]
    build_bpf(&manifest, &out);
}
