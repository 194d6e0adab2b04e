// A one-field variant delegates to its field, which must then implement `Classify`.
use retry_runtime::Classify;

#[derive(Debug, Classify)]
enum AdapterError {
    Io(std::io::Error),
}

fn main() {}
