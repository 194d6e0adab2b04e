// `#[retry]` goes on an async fn.
use retry_runtime::retry;

#[retry(upstream = "sber", method = GET)]
pub struct Sber;

fn main() {}
