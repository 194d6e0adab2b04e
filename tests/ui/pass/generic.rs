// Generic functions and methods: type parameters, lifetimes, `impl Trait` in argument and
// return position.
use std::fmt::Display;

use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "catalog", method = GET)]
pub async fn fetch<T: Default + Send, K: Display + Sync>(key: &K) -> Result<T, AdapterError> {
    let _ = key.to_string();
    Ok(T::default())
}

#[retry(upstream = "catalog", method = GET)]
pub async fn name<'a>(names: &'a [String], i: usize) -> Result<&'a str, AdapterError> {
    Ok(&names[i])
}

#[retry(upstream = "catalog", method = GET)]
pub async fn shown(id: impl Display + Clone) -> Result<impl Display, AdapterError> {
    Ok(format!("#{id}"))
}

pub struct Repo<T>(Vec<T>);

impl<T: Clone + Send + Sync> Repo<T> {
    #[retry(upstream = "catalog", method = GET)]
    pub async fn first(&self) -> Result<Option<T>, AdapterError> {
        Ok(self.0.first().cloned())
    }
}

fn main() {
    let _ = fetch::<u32, _>(&"k");
    let _ = Repo(vec![1]).first();
}
