// A stated status must be an HTTP status, and it means a response arrived: an evidence that
// says otherwise is refused, located.
use retry_runtime::Classify;

#[derive(Debug, Classify)]
pub enum AdapterError {
    #[classify(from)]
    Retry(retry_runtime::Error),
    #[classify(status = 42, permanent = "contract")]
    NotAStatus,
    #[classify(status = 422, evidence = "not_sent")]
    Contradicts,
}

fn main() {}
