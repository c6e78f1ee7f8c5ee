//! sbm-rpm-server: see `sbm-rpm-server --help` and docs/rpm.md.
fn main() {
    std::process::exit(sbm::rpm::server::main_with_args(std::env::args_os()));
}
