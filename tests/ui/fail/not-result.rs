// The loop retries on `Err`: the function returns a `Result`.
use retry_runtime::retry;

#[retry(upstream = "sber", method = GET)]
async fn status() -> Option<u32> {
    Some(1)
}

#[retry(upstream = "sber", method = GET)]
async fn nothing() {}

#[retry(upstream = "sber", method = GET)]
async fn pair() -> (u32, u32) {
    (1, 2)
}

fn main() {}
