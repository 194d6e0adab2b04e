// A variant that neither wraps a classifying error nor states its facts would drop them
// silently: the derive refuses it, and says what to write.
use retry_runtime::Classify;

#[derive(Debug, Classify)]
enum AdapterError {
    #[classify(from)]
    Retry(retry_runtime::Error),
    Rejected { code: String, detail: String },
    Timeout,
}

#[derive(Debug, Classify)]
enum Misspelt {
    #[classify(evidence = "recieved")]
    Rejected,
    #[classify(permanent = "fatal")]
    Fatal,
    #[classify(transparent)]
    Two(retry_runtime::Error, String),
    #[classify(from, permanent = "other")]
    Both(retry_runtime::Error),
}

fn main() {}
