//! A fake upstream over TCP that deduplicates by idempotency key, like a payment API.
//!
//! Protocol: one line per request, `<key> <attempt> <worker>\n`; the answer is `applied\n` the
//! first time a key is seen and `replayed\n` after that. It records every delivery, so tests
//! can check that each attempt was delivered once and each key's effect applied once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub key: String,
    pub attempt: u32,
    pub worker: String,
}

#[derive(Default)]
struct State {
    deliveries: Vec<Delivery>,
    effects: HashMap<String, u32>,
}

#[derive(Clone)]
pub struct Upstream {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("upstream addr");
        let state = Arc::new(Mutex::new(State::default()));
        let st = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let st = Arc::clone(&st);
                tokio::spawn(async move {
                    let (r, mut w) = sock.into_split();
                    let mut lines = BufReader::new(r).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let mut parts = line.split(' ');
                        let (Some(key), Some(attempt), Some(worker)) =
                            (parts.next(), parts.next(), parts.next())
                        else {
                            let _ = w.write_all(b"bad\n").await;
                            continue;
                        };
                        let answer = {
                            let mut s = st.lock().unwrap();
                            s.deliveries.push(Delivery {
                                key: key.to_owned(),
                                attempt: attempt.parse().unwrap_or(0),
                                worker: worker.to_owned(),
                            });
                            let n = s.effects.entry(key.to_owned()).or_insert(0);
                            if *n == 0 {
                                *n = 1;
                                "applied\n"
                            } else {
                                "replayed\n"
                            }
                        };
                        if w.write_all(answer.as_bytes()).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Upstream { addr, state }
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.state.lock().unwrap().deliveries.clone()
    }

    /// How many times each key's effect was applied (always 1 for a deduplicating upstream).
    pub fn effects(&self) -> HashMap<String, u32> {
        self.state.lock().unwrap().effects.clone()
    }
}

/// Sends one request and returns the answer line.
pub async fn send(
    addr: SocketAddr,
    key: &str,
    attempt: u32,
    worker: &str,
) -> std::io::Result<String> {
    let sock = TcpStream::connect(addr).await?;
    let (r, mut w) = sock.into_split();
    w.write_all(format!("{key} {attempt} {worker}\n").as_bytes())
        .await?;
    let mut line = String::new();
    BufReader::new(r).read_line(&mut line).await?;
    Ok(line.trim().to_owned())
}
