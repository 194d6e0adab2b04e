// A write without a key but with a reliable check: the check gets the same arguments.
use retry_runtime::{Reconciled, retry};
use retry_tests::AdapterError;

pub struct Payment {
    pub order: u64,
}

pub struct Gateway;

impl Gateway {
    #[retry(upstream = "gateway", method = POST, reconcile = Self::find_payment)]
    pub async fn pay(&self, payment: &Payment) -> Result<u64, AdapterError> {
        Ok(payment.order)
    }

    async fn find_payment(&self, payment: &Payment) -> Reconciled<u64> {
        let _ = payment;
        Reconciled::Unknown
    }

    #[retry(upstream = "gateway", method = POST, reconcile = check_refund)]
    pub async fn refund(&mut self, order: u64, reason: String) -> Result<u64, AdapterError> {
        let _ = reason;
        Ok(order)
    }
}

async fn check_refund(gateway: &Gateway, order: u64, reason: String) -> Reconciled<u64> {
    let _ = (gateway, reason);
    Reconciled::Happened(order)
}

fn main() {}
