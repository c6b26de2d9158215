fn main() {
    eprintln!("pplan-exec: not built yet");
    std::process::exit(1);
}
