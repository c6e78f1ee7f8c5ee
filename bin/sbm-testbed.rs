//! sbm-testbed: see `testbed/wan --help`, `testbed/shape --help` and testbed/README.md.
fn main() {
    std::process::exit(sbm::testbed::main_with_args(std::env::args_os()));
}
