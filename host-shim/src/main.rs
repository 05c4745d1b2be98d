//! `hipdnn-shim`: loads plugins as hipDNN does and runs graphs (issue 5).

fn main() {
    eprintln!("hipdnn-shim: not built yet (issue 5)");
    std::process::exit(2);
}
