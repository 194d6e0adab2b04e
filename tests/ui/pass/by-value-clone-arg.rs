// By-value arguments are cloned for each attempt, so the body may consume them; patterns and
// `mut` bindings included. A `Clone` receiver taken by value is cloned too.
use retry_runtime::retry;
use retry_tests::AdapterError;

#[derive(Clone, Debug)]
pub struct Order {
    pub id: u64,
    pub lines: Vec<String>,
}

fn consume(order: Order) -> u64 {
    order.id + order.lines.len() as u64
}

#[retry(upstream = "orders", method = PUT, idempotency = order.id.to_string())]
pub async fn save(order: Order, mut note: String) -> Result<u64, AdapterError> {
    note.push('!');
    Ok(consume(order) + note.len() as u64)
}

#[retry(upstream = "orders", method = GET)]
pub async fn pair((a, b): (u32, String), Order { id, .. }: Order) -> Result<String, AdapterError> {
    Ok(format!("{a}{b}{id}"))
}

#[derive(Clone)]
pub struct Client {
    base: String,
}

impl Client {
    #[retry(upstream = "orders", method = GET)]
    pub async fn into_base(self) -> Result<String, AdapterError> {
        Ok(self.base)
    }

    #[retry(upstream = "orders", method = GET)]
    pub async fn shared(self: std::sync::Arc<Self>) -> Result<usize, AdapterError> {
        Ok(self.base.len())
    }
}

fn main() {
    let _ = save(Order { id: 1, lines: vec![] }, String::new());
    let _ = Client { base: String::new() }.into_base();
}
