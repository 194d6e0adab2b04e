//! SQLite's group commit: every write of this process goes through one writer task, which
//! commits the writes waiting at that moment in one transaction.

use retry_durable::sqlx::{self, Pool};
use tokio::sync::{mpsc, oneshot};

use super::dialect::KeyDialect;
use super::driver::Arg;

/// The writer task's handle; the task ends when every handle is dropped.
#[derive(Clone)]
pub(super) struct Writer(mpsc::UnboundedSender<Job>);

impl Writer {
    /// Starts the writer task on `pool`.
    pub(super) fn spawn<DB: KeyDialect>(pool: Pool<DB>) -> Writer {
        let (jobs, rx) = mpsc::unbounded_channel();
        tokio::spawn(group_commit::<DB>(pool, rx));
        Writer(jobs)
    }

    /// Runs `sql` in the next group: the rows it changed, answered once its transaction
    /// committed ([`sqlx::Error::PoolClosed`] if the writer task has ended).
    pub(super) async fn write(
        &self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<u64, sqlx::Error> {
        let (done, answer) = oneshot::channel();
        let job = Job {
            sql,
            args: args.iter().map(OwnedArg::of).collect(),
            done,
        };
        self.0.send(job).map_err(|_| sqlx::Error::PoolClosed)?;
        answer.await.map_err(|_| sqlx::Error::PoolClosed)?
    }
}

/// A write for the writer task: its statement, its values, and where its result goes.
struct Job {
    sql: &'static str,
    args: Vec<OwnedArg>,
    done: oneshot::Sender<Result<u64, sqlx::Error>>,
}

enum OwnedArg {
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
}

impl OwnedArg {
    fn of(arg: &Arg<'_>) -> Self {
        match *arg {
            Arg::Int(n) => OwnedArg::Int(n),
            Arg::Text(t) => OwnedArg::Text(t.to_owned()),
            Arg::Bytes(b) => OwnedArg::Bytes(b.to_vec()),
        }
    }

    fn borrow(&self) -> Arg<'_> {
        match self {
            OwnedArg::Int(n) => Arg::Int(*n),
            OwnedArg::Text(t) => Arg::Text(t),
            OwnedArg::Bytes(b) => Arg::Bytes(b),
        }
    }
}

/// The most writes committed in one transaction.
const GROUP: usize = 256;

/// The writer task: takes the writes waiting, runs them in one `BEGIN IMMEDIATE` transaction,
/// commits, then answers each. Ends when every store handle is dropped.
async fn group_commit<DB: KeyDialect>(pool: Pool<DB>, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let mut group = Vec::with_capacity(GROUP);
    while jobs.recv_many(&mut group, GROUP).await > 0 {
        let mut results = Vec::with_capacity(group.len());
        let committed = async {
            let mut tx = match DB::STATEMENTS.begin_write {
                Some(b) => pool.begin_with(b).await?,
                None => pool.begin().await?,
            };
            for job in &group {
                let args: Vec<Arg<'_>> = job.args.iter().map(OwnedArg::borrow).collect();
                // A failed statement is that write's error; the others still commit (SQLite
                // rolls back the statement, not the transaction).
                results.push(DB::run(&mut tx, job.sql, &args).await);
            }
            tx.commit().await
        }
        .await;
        match committed {
            Ok(()) => {
                for (job, result) in group.drain(..).zip(results) {
                    let _ = job.done.send(result);
                }
            }
            Err(e) => {
                let e = e.to_string();
                for job in group.drain(..) {
                    let _ = job.done.send(Err(sqlx::Error::Protocol(format!(
                        "the group commit failed: {e}"
                    ))));
                }
            }
        }
    }
}
