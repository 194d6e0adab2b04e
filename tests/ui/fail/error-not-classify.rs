// The function's error type must say what a failure proves: reported once, at the type.
use retry_runtime::retry;

#[derive(Debug)]
pub struct MyError;

impl std::fmt::Display for MyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("my error")
    }
}

impl From<retry_runtime::Error> for MyError {
    fn from(_: retry_runtime::Error) -> Self {
        MyError
    }
}

#[retry(upstream = "catalog", method = GET)]
async fn item(id: u32) -> Result<u32, MyError> {
    Ok(id)
}

fn main() {}
