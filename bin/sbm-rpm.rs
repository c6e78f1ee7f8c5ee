//! sbm-rpm: see `sbm-rpm --help` and docs/rpm.md.
fn main() {
    std::process::exit(sbm::rpm::client::main_with_args(std::env::args_os()));
}
