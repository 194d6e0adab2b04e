//! The credentials refresh before retrying a 401: the upstream's
//! [`RefreshAuth`](crate::registry::RefreshAuth) hook, once per call, inside its deadline.

use tracing::Instrument;

use super::state::Call;
use crate::decision::{DenyReason, Failure};
use crate::error::Error;

impl Call<'_> {
    /// Runs the upstream's refresh hook (if it has one) before the retry of `failure`, a 401;
    /// a call refreshes once. The hook runs inside the operation's deadline like everything
    /// else: the error ending the call when it fails or outlasts the deadline.
    pub(super) async fn refresh_credentials(&mut self, failure: &Failure) -> Result<(), Error> {
        self.auth_refresh_used = true;
        let Some(hook) = self.upstream.refresh_hook().cloned() else {
            return Ok(());
        };
        let refresh = hook.refresh().instrument(self.spans.call().clone());
        match tokio::time::timeout_at(self.timing.deadline(), refresh).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Error::RefreshFailed(e)),
            Err(_) => {
                self.on_denied(
                    DenyReason::Deadline,
                    "the credentials refresh outlasted the deadline",
                );
                Err(Error::DeadlineExceeded {
                    upstream: self.upstream.name_arc().clone(),
                    attempts: self.timing.attempts(),
                    last_status: failure.status,
                    last_evidence: Some(failure.evidence),
                })
            }
        }
    }
}
