//! Runs the real Restate server and HAProxy; skipped with a note where they are missing,
//! failed when `CADRE_REQUIRE_RESTATE` is set (as `.ci/run` does).

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use axum::routing::any;
use axum::Router;
use cadre_testkit::restate::{engine_or_skip, Haproxy, RestateServer};
use serde_json::json;

/// An h2c (and HTTP/1) server on a free port answering `worker NAME` to every request, on
/// its own runtime so that dropping it ends its listener and every connection at once.
struct Worker {
    addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Worker {
    fn start(name: &str) -> Worker {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let answer = format!("worker {name}");
        runtime.spawn(async move {
            let app = Router::new().fallback(any(move || async move { answer }));
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
        Worker {
            addr,
            runtime: Some(runtime),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

fn h2c_client() -> reqwest::Client {
    cadre_testkit::http_client_builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

async fn get(url: &str) -> (reqwest::StatusCode, String) {
    let resp = cadre_testkit::http_client().get(url).send().await.unwrap();
    (resp.status(), resp.text().await.unwrap())
}

/// Waits (up to `within`) for `cond`, polling.
async fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !cond() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn restate_servers_start_side_by_side_register_and_restart() {
    if !engine_or_skip() {
        return;
    }
    let (one, two) = tokio::join!(RestateServer::start(), RestateServer::start());
    let mut one = one.unwrap();
    let two = two.unwrap();
    for server in [&one, &two] {
        let (status, _) = get(&format!("{}health", server.admin_url())).await;
        assert_eq!(status, 200, "{}", server.log());
        let (status, _) = get(&format!("{}restate/health", server.ingress_url())).await;
        assert_eq!(status, 200, "{}", server.log());
        // None of the defaults: each server has its own ports.
        for default in [":8080/", ":9070/"] {
            assert!(!server.ingress_url().ends_with(default));
            assert!(!server.admin_url().ends_with(default));
        }
        assert_eq!(
            server.deployments().await.unwrap(),
            json!({"deployments": []})
        );
    }
    assert_ne!(one.ingress_url(), two.ingress_url());
    assert_ne!(one.admin_url(), two.admin_url());
    assert!(one.log().contains("Restate Server"), "{}", one.log());

    // Something that is not a Restate deployment is refused, with the admin API's reason.
    let plain = Worker::start("plain");
    let err = one
        .register(&format!("http://{}/", plain.addr))
        .await
        .unwrap_err();
    let err = err.to_string();
    assert!(
        err.contains("/deployments") && err.contains("restate_code"),
        "{err}"
    );

    // A restart keeps the ports and comes back healthy, as a new process.
    let before = one.pid().unwrap();
    one.restart().await.unwrap();
    assert_ne!(one.pid().unwrap(), before);
    let (status, _) = get(&format!("{}restate/health", one.ingress_url())).await;
    assert_eq!(status, 200);

    // Dropping a server kills it: its ports close.
    let admin = two.admin_addr();
    assert_eq!(two.admin_url(), format!("http://{admin}/"));
    assert_eq!(two.ingress_url(), format!("http://{}/", two.ingress_addr()));
    drop(two);
    assert!(
        TcpStream::connect_timeout(&admin, Duration::from_secs(1)).is_err(),
        "the dropped server still listens on {admin}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(has_restate, has_haproxy)),
    ignore = "needs Restate and HAProxy: npm install --prefix target/npm-restate @restatedev/restate-server@1.7.12; apt-get install haproxy (.ci/run installs both)"
)]
async fn haproxy_balances_h2c_and_marks_a_stopped_worker_down() {
    if !engine_or_skip() {
        return;
    }
    let w1 = Worker::start("w1");
    let w2 = Worker::start("w2");
    let proxy = Haproxy::start(&[("w1".to_owned(), w1.addr), ("w2".to_owned(), w2.addr)]).unwrap();
    assert_eq!(proxy.uri(), format!("http://{}/", proxy.addr()));
    assert!(
        wait_until(Duration::from_secs(10), || {
            proxy.backend_status().unwrap()
                == [
                    ("w1".to_owned(), "UP".to_owned()),
                    ("w2".to_owned(), "UP".to_owned()),
                ]
        })
        .await,
        "{:?}\n{}",
        proxy.backend_status(),
        proxy.log()
    );

    let client = h2c_client();
    let mut seen = Vec::new();
    for i in 0..4 {
        let resp = client
            .post(format!("{}invoke/Svc/handler{i}", proxy.uri()))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.version(), reqwest::Version::HTTP_2);
        assert_eq!(resp.status(), 200);
        seen.push(resp.text().await.unwrap());
    }
    seen.sort();
    assert_eq!(seen, ["worker w1", "worker w1", "worker w2", "worker w2"]);
    assert!(
        proxy.log().contains("/invoke/Svc/handler0"),
        "{}",
        proxy.log()
    );

    // A stopped worker is marked down and everything goes to the other one.
    drop(w2);
    assert!(
        wait_until(Duration::from_secs(10), || {
            proxy
                .backend_status()
                .unwrap()
                .contains(&("w2".to_owned(), "DOWN".to_owned()))
        })
        .await,
        "{:?}",
        proxy.backend_status()
    );
    for _ in 0..3 {
        let resp = client.get(proxy.uri()).send().await.unwrap();
        assert_eq!(resp.text().await.unwrap(), "worker w1");
    }

    // Dropping the proxy kills it.
    let addr = proxy.addr();
    drop(proxy);
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err());
}
