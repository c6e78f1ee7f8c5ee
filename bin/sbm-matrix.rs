//! sbm-matrix: see `scripts/matrix --help` and README.md.
fn main() {
    std::process::exit(sbm::matrix::main_with_args(std::env::args_os()));
}
