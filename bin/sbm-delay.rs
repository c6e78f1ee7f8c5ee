//! sbm-delay: see `sbm-delay --help` and testbed/README.md.
fn main() {
    std::process::exit(sbm::delay::main_with_args(std::env::args_os()));
}
