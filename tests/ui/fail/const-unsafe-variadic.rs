// `const fn`, `unsafe fn` and variadics cannot hold an attempt loop. (The variadic is named `_`
// so rustc has no future-compatibility warning of its own to add to the snapshot.)
use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "sber", method = GET)]
const async fn constant() -> Result<u32, AdapterError> {
    Ok(1)
}

#[retry(upstream = "sber", method = GET)]
async unsafe fn dangerous() -> Result<u32, AdapterError> {
    Ok(1)
}

#[retry(upstream = "sber", method = GET)]
async fn variadic(n: u32, _: ...) -> Result<u32, AdapterError> {
    Ok(n)
}

fn main() {}
