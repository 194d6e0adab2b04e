use retry_runtime::http::{HttpError, RequestBuilderExt, ResponseExt};
use retry_runtime::{Classify, Drain, Registry, retry};

/// What a call to the payments upstream can fail with. `Classify` tells the engine what each
/// failure proves; `thiserror` writes the messages.
#[derive(Debug, thiserror::Error, Classify)]
pub enum PaymentsError {
    /// The runtime's outcomes (deadline, local refusal, a write that may have happened).
    #[error(transparent)]
    Retry(#[from] retry_runtime::Error),
    /// Transport failures and error statuses, from `send_attempt().await?`.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// A 422: the upstream refused the charge; sending it again cannot help.
    #[error("charge declined: {reason}")]
    #[classify(status = 422, permanent = "contract")]
    Declined { reason: String },
}

#[derive(serde::Serialize)]
pub struct Charge {
    pub order: String,
    pub cents: u64,
}

pub struct Payments {
    pub client: reqwest::Client,
    pub base: String,
}

impl Payments {
    /// A read: retried when the evidence, the budget and the deadline allow.
    #[retry(upstream = "payments", method = GET)]
    pub async fn state(&self, id: &str) -> Result<String, PaymentsError> {
        let url = format!("{}/payments/{id}", self.base);
        let response = self.client.get(url).send_attempt().await?;
        Ok(response.read_text().await?)
    }

    /// A write: every attempt carries the same key, and the upstream deduplicates by it.
    #[retry(upstream = "payments", method = POST, idempotency = format!("charge-{}", charge.order))]
    pub async fn charge(&self, charge: &Charge) -> Result<String, PaymentsError> {
        let url = format!("{}/charges", self.base);
        match self.client.post(url).json(charge).send_attempt().await {
            Ok(response) => Ok(response.read_text().await?),
            Err(e) if e.status().is_some_and(|s| s.as_u16() == 422) => {
                let reason = match e.into_response() {
                    Some(response) => response.read_text().await?,
                    None => String::new(),
                };
                Err(PaymentsError::Declined { reason })
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt::init();
    Registry::global().load_file("upstreams.toml")?; // every mistake at once, located
    Registry::global().verify()?; // every upstream a #[retry] names is configured
    tokio::spawn(Drain::global().clone().on_shutdown_signal()); // no new retries on SIGTERM
    let payments = Payments {
        client: retry_runtime::http::client_builder().build()?, // no hidden retries or redirects
        base: std::env::var("PAYMENTS_URL").unwrap_or("http://127.0.0.1:8080".into()),
    };
    println!("pay-1 is {}", payments.state("pay-1").await?);
    let charge = Charge {
        order: "42".into(),
        cents: 1999,
    };
    match payments.charge(&charge).await {
        Ok(receipt) => println!("charged: {receipt}"),
        Err(PaymentsError::Declined { reason }) => println!("declined: {reason}"),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}
