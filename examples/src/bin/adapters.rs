//! The catalog adapters (a read, a keyed write, a checked write, a write sent once) against the
//! lab's catalog, which executes half the registrations and then resets the connection before
//! answering.
//!
//! ```text
//! cargo run -p retry-examples --bin adapters
//! ```

use std::time::Duration;

use retry_examples::adapters::{CatalogAdapter, OrderId, RegisterCommand};
use retry_examples::lab::catalog::{self, CatalogState};
use retry_examples::lab::config::LabUpstreams;
use retry_examples::lab::scenarios::Scenario;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let state = CatalogState::new(Scenario::ResetUnkeyed, 7, Duration::from_secs(60), 40.0);
    let server = catalog::start(state.clone()).await?;
    let registries = LabUpstreams::load(&retry_examples::lab::config::default_path())?
        .registries(retry_examples::lab::Design::BTuned, 7);
    let adapter = CatalogAdapter::new(server.url(), registries.middle);
    println!(
        "catalog at {}: half the writes are executed, then the connection is reset\n",
        server.url()
    );

    for order in 1..=4 {
        let cmd = RegisterCommand::new(OrderId(order));
        println!("order {order}: key {}", cmd.idempotency_key());
        println!(
            "  register (keyed)        -> {:?}",
            adapter.register(&cmd).await.map_err(|e| e.to_string())
        );
        println!(
            "  order_status            -> {:?}",
            adapter
                .order_status(&cmd.order)
                .await
                .map_err(|e| e.to_string())
        );
    }
    for order in 11..=14 {
        let cmd = RegisterCommand::new(OrderId(order));
        let result = adapter.register_checked(&cmd).await;
        println!(
            "order {order}: register_checked (reconcile) -> {:?}",
            result.map_err(|e| e.to_string())
        );
    }
    for order in 21..=24 {
        let cmd = RegisterCommand::new(OrderId(order));
        match adapter.register_once(&cmd).await {
            Ok(r) => println!(
                "order {order}: register_once -> registered #{}",
                r.registration
            ),
            Err(e) if e.as_ambiguous().is_some() => {
                println!(
                    "order {order}: register_once -> AMBIGUOUS, not retried: reconcile before acting"
                )
            }
            Err(e) => println!("order {order}: register_once -> failed: {e}"),
        }
    }
    let counts = state.counts();
    let mut orders: Vec<_> = counts.calls.keys().copied().collect();
    orders.sort();
    println!("\norder  catalog requests  executions (1 = no duplicate)");
    for order in orders {
        let executed = counts.executions.get(&order).copied().unwrap_or(0);
        println!("{order:>5}  {:>16}  {executed:>10}", counts.calls[&order]);
    }
    Ok(())
}
