//! sbm-send: see `sbm-send --help` and README.md.
fn main() {
    std::process::exit(sbm::send::main_with_args(std::env::args_os()));
}
