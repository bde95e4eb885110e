//! Talking to a run through Restate's ingress: submit it, follow its roster, wait for its
//! answer, cancel it.

use crate::wire::{AgentCall, AgentTranscript, Progress};
use cadre_core::Delegated;
use serde::Deserialize;
use std::time::Duration;

/// Why the ingress could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The request did not get through.
    #[error("cannot reach Restate's {api} at {url}: {source}")]
    Unreachable {
        /// Which of Restate's APIs: `ingress` or `admin API`.
        api: &'static str,
        /// What was asked.
        url: String,
        /// Why.
        source: reqwest::Error,
    },
    /// The HTTP client's TLS could not be set up.
    #[error("cannot set up TLS for the ingress client: {source}")]
    Tls {
        /// Why.
        source: rustls::Error,
    },
    /// Restate answered with an error.
    #[error("Restate answered {status} to {url}: {body}")]
    Status {
        /// What was asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// Its body.
        body: String,
        /// The ingress said the error is its own (`x-restate-error-source: ingress`: no such
        /// invocation, a bad request), not the handler's result.
        from_ingress: bool,
    },
    /// The request could not be encoded.
    #[error("the request to {url} could not be encoded: {source}")]
    Encode {
        /// Where it was going.
        url: String,
        /// Why.
        source: serde_json::Error,
    },
    /// `--register` named Restate's ingress, which does not take registrations.
    #[error("{url} is Restate's ingress, not its admin API: register with the admin API (port 9070 by default, e.g. http://127.0.0.1:9070)")]
    IngressNotAdmin {
        /// What was asked.
        url: String,
    },
    /// The answer was not what the service returns.
    #[error("unexpected answer from {url}: {source}")]
    Answer {
        /// What was asked.
        url: String,
        /// What did not fit.
        source: serde_json::Error,
    },
}

/// A client of one Restate ingress.
#[derive(Debug, Clone)]
pub struct Ingress {
    base: String,
    http: reqwest::Client,
    /// Which of Restate's APIs `base` is, for messages.
    api: &'static str,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Sent {
    invocation_id: String,
}

impl Ingress {
    /// A client of the ingress at `base` (`http://127.0.0.1:8080`).
    pub fn new(base: &str) -> Result<Self, ClientError> {
        Self::of(base, "ingress")
    }

    /// A client of Restate's API `api` at `base`.
    fn of(base: &str, api: &'static str) -> Result<Self, ClientError> {
        let http = cadre_model::http_client_builder()
            .map_err(|source| ClientError::Tls { source })?
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|source| ClientError::Unreachable {
                api,
                url: base.to_owned(),
                source,
            })?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            http,
            api,
        })
    }

    /// Submits the run's primary agent, keyed by the run id: submitting the same run
    /// again attaches to the first. Returns the invocation id.
    pub async fn submit(&self, call: &AgentCall) -> Result<String, ClientError> {
        self.submit_keyed(call, &call.run).await
    }

    /// Submits the agent `call` under the idempotency key `key`: submitting the same key
    /// again (while Restate keeps it) attaches to the first invocation, running or ended,
    /// instead of running the agent again. Returns the invocation id.
    pub async fn submit_keyed(&self, call: &AgentCall, key: &str) -> Result<String, ClientError> {
        let url = format!("{}/CadreAgent/run/send", self.base);
        let body = serde_json::to_vec(call).map_err(|source| ClientError::Encode {
            url: url.clone(),
            source,
        })?;
        let request = self
            .http
            .post(&url)
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .body(body);
        let sent: Sent = self.json(&url, request).await?;
        Ok(sent.invocation_id)
    }

    /// Waits for the invocation `id` to end and returns the primary agent's report.
    pub async fn attach(&self, id: &str) -> Result<Delegated, ClientError> {
        let url = format!("{}/restate/invocation/{id}/attach", self.base);
        self.json(&url, self.http.get(&url)).await
    }

    /// The agents of run `run` that are running now.
    pub async fn roster(&self, run: &str) -> Result<Vec<Progress>, ClientError> {
        let url = format!("{}/CadreRoster/{run}/roster", self.base);
        self.json(&url, self.http.post(&url).timeout(Duration::from_secs(10)))
            .await
    }

    /// The transcripts of run `run`'s agents that have ended.
    pub async fn transcripts(&self, run: &str) -> Result<Vec<AgentTranscript>, ClientError> {
        let url = format!("{}/CadreRoster/{run}/transcripts", self.base);
        self.json(&url, self.http.post(&url).timeout(Duration::from_secs(60)))
            .await
    }

    /// Tokens the whole tree of run `run` has used so far.
    pub async fn tokens(&self, run: &str) -> Result<u64, ClientError> {
        let url = format!("{}/CadreRun/{run}/tokens", self.base);
        self.json(&url, self.http.post(&url).timeout(Duration::from_secs(10)))
            .await
    }

    /// Asks Restate to cancel run `run`: its primary invocation and every call below it.
    pub async fn cancel(&self, run: &str) -> Result<(), ClientError> {
        let url = format!("{}/CadreRun/{run}/cancel/send", self.base);
        let _: serde_json::Value = self
            .json(&url, self.http.post(&url).timeout(Duration::from_secs(10)))
            .await?;
        Ok(())
    }

    /// Asks Restate to cancel the invocations `ids` of run `run` (and every call below
    /// each): a workflow run's items, which have no one primary invocation.
    pub async fn cancel_items(&self, run: &str, ids: &[String]) -> Result<(), ClientError> {
        let url = format!("{}/CadreRun/{run}/cancel_items/send", self.base);
        let request = self
            .http
            .post(&url)
            .json(ids)
            .timeout(Duration::from_secs(10));
        let _: serde_json::Value = self.json(&url, request).await?;
        Ok(())
    }

    /// Registers the service endpoint at `uri` with the Restate server whose admin API is
    /// at `admin` (again, when it was registered before: its services may have changed).
    pub async fn register(admin: &str, uri: &str) -> Result<(), ClientError> {
        Admin::new(admin)?.register(uri).await
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        let unreachable = |source| ClientError::Unreachable {
            api: self.api,
            url: url.to_owned(),
            source,
        };
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status();
        // The ingress marks its own errors; the admin API never does.
        let from_ingress = response
            .headers()
            .get("x-restate-error-source")
            .is_some_and(|v| v == "ingress");
        let body = response.bytes().await.map_err(unreachable)?;
        if !status.is_success() && from_ingress && self.api == "admin API" {
            return Err(ClientError::IngressNotAdmin {
                url: self.base.clone(),
            });
        }
        if !status.is_success() {
            return Err(ClientError::Status {
                url: url.to_owned(),
                status: status.as_u16(),
                body: String::from_utf8_lossy(&body).into_owned(),
                from_ingress,
            });
        }
        serde_json::from_slice(&body).map_err(|source| ClientError::Answer {
            url: url.to_owned(),
            source,
        })
    }
}

/// A client of Restate's admin API.
#[derive(Debug, Clone)]
pub struct Admin(Ingress);

/// Where one invocation of a run is stuck, as Restate's introspection tells it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Stuck {
    /// The invocation's target (`CadreAgent/run`).
    pub target: String,
    /// Attempts so far.
    pub retry_count: u64,
    /// Why the last attempt failed, as Restate says it.
    pub last_failure: String,
}

#[derive(Deserialize)]
struct Rows<T> {
    rows: Vec<T>,
}

impl Admin {
    /// A client of the admin API at `base` (`http://127.0.0.1:9070`).
    pub fn new(base: &str) -> Result<Self, ClientError> {
        Ingress::of(base, "admin API").map(Self)
    }

    /// The admin API of the Restate server whose ingress is at `ingress`, where the
    /// server's defaults put it: the same host, port 9070.
    pub fn beside(ingress: &str) -> Option<String> {
        let url = reqwest::Url::parse(ingress).ok()?;
        let mut admin = url.clone();
        admin.set_port(Some(9070)).ok()?;
        Some(admin.as_str().trim_end_matches('/').to_owned())
    }

    /// Registers the service endpoint at `uri` (again, when it was registered before: its
    /// services may have changed).
    pub async fn register(&self, uri: &str) -> Result<(), ClientError> {
        let client = &self.0;
        let url = format!("{}/deployments", client.base);
        let body = serde_json::json!({ "uri": uri, "force": true });
        let _: serde_json::Value = client
            .json(
                &url,
                client
                    .http
                    .post(&url)
                    .json(&body)
                    .timeout(Duration::from_secs(30)),
            )
            .await?;
        Ok(())
    }

    /// The invocations of the tree started by invocation `root` that Restate is retrying
    /// after a failed attempt, most tried first: an unreachable worker shows here while the
    /// run waits.
    pub async fn stuck(&self, root: &str) -> Result<Vec<Stuck>, ClientError> {
        self.stuck_among(&[root.to_owned()]).await
    }

    /// The invocations of the trees started by the invocations `roots` (a workflow run's
    /// items, each the root of its own) that Restate is retrying after a failed attempt,
    /// most tried first.
    pub async fn stuck_among(&self, roots: &[String]) -> Result<Vec<Stuck>, ClientError> {
        let client = &self.0;
        let url = format!("{}/query", client.base);
        // Every ancestor of an invocation still going is still going too (it awaits it), so
        // the tree is found among those, by who invoked whom.
        let query = "SELECT id, invoked_by_id, target, retry_count, last_failure, status \
                     FROM sys_invocation WHERE status <> 'completed' AND target LIKE 'Cadre%'";
        let request = client
            .http
            .post(&url)
            .header("accept", "application/json")
            .json(&serde_json::json!({ "query": query }))
            .timeout(Duration::from_secs(10));
        let rows: Rows<Going> = client.json(&url, request).await?;
        Ok(stuck_in(roots, rows.rows))
    }
}

/// An invocation not yet completed, as the introspection lists it.
#[derive(Debug, Deserialize)]
struct Going {
    id: String,
    #[serde(default)]
    invoked_by_id: Option<String>,
    target: String,
    #[serde(default)]
    retry_count: u64,
    #[serde(default)]
    last_failure: Option<String>,
    status: String,
}

/// Those of `going` in the trees under `roots` that are backing off after a failure, most
/// tried first.
fn stuck_in(roots: &[String], going: Vec<Going>) -> Vec<Stuck> {
    let mut tree: std::collections::BTreeSet<String> = roots.iter().cloned().collect();
    // Each pass adds the children of what is in the tree; the tree is shallow.
    loop {
        let before = tree.len();
        for g in &going {
            if g.invoked_by_id.as_ref().is_some_and(|p| tree.contains(p)) {
                tree.insert(g.id.clone());
            }
        }
        if tree.len() == before {
            break;
        }
    }
    let mut stuck: Vec<Stuck> = going
        .into_iter()
        .filter(|g| g.status == "backing-off" && tree.contains(&g.id))
        .filter_map(|g| {
            Some(Stuck {
                target: g.target,
                retry_count: g.retry_count,
                last_failure: g.last_failure?,
            })
        })
        .collect();
    stuck.sort_by_key(|s| std::cmp::Reverse(s.retry_count));
    stuck
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_the_runs_own_tree_is_stuck() {
        let going = |id: &str, by: Option<&str>, status: &str, tries: u64| Going {
            id: id.to_owned(),
            invoked_by_id: by.map(str::to_owned),
            target: format!("CadreAgent/run#{id}"),
            retry_count: tries,
            last_failure: (status == "backing-off").then(|| format!("failed {id}")),
            status: status.to_owned(),
        };
        let rows = vec![
            going("grandchild", Some("child"), "backing-off", 3),
            going("root", None, "suspended", 0),
            going("child", Some("root"), "suspended", 0),
            going("other", None, "backing-off", 9),
            going("sibling", Some("root"), "backing-off", 5),
        ];
        let stuck = stuck_in(&["root".to_owned()], rows);
        let names: Vec<&str> = stuck.iter().map(|s| s.last_failure.as_str()).collect();
        assert_eq!(names, ["failed sibling", "failed grandchild"]);
    }
}
