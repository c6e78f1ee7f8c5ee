//! sbm-trace: see `sbm-trace --help` and README.md.
fn main() {
    std::process::exit(sbm::trace::main_with_args(std::env::args_os()));
}
