//! sbm-sink: see `sbm-sink --help` and README.md.
fn main() {
    std::process::exit(sbm::sink::main_with_args(std::env::args_os()));
}
