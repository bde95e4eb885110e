use super::refused_uri;
use cadre_model::{Model, OpenAiConfig, OpenAiModel, RecordingModel};
use cadre_testkit::MockServer;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: &str = "sk-openai-window-SECRET-0099";

fn model(server: &MockServer) -> OpenAiModel {
    let config = OpenAiConfig::new()
        .with_base_url(format!("{}/v1", server.uri()))
        .with_api_key(KEY);
    OpenAiModel::new(config).unwrap()
}

fn paths(server: &MockServer) -> Vec<String> {
    server.info_requests().into_iter().map(|r| r.path).collect()
}

#[tokio::test]
async fn llama_cpp_props_n_ctx_is_reported() {
    let server = MockServer::start().await;
    // llama.cpp lists its model without a context length (n_ctx_train is the trained
    // maximum, not what the server was started with), so `/props` decides.
    server.set_models(json!({"object": "list", "data": [
        {"id": "qwen.gguf", "object": "model", "meta": {"n_ctx_train": 131072}}
    ]}));
    server.set_props(json!({
        "default_generation_settings": {"n_ctx": 8192, "params": {}},
        "total_slots": 1
    }));
    let m = model(&server);
    assert_eq!(m.context_window("qwen.gguf").await, Some(8192));
    assert_eq!(paths(&server), ["/v1/models", "/props"]);
    let auth = format!("Bearer {KEY}");
    for r in server.info_requests() {
        assert_eq!(r.header("authorization"), Some(auth.as_str()), "{}", r.path);
    }
}

#[tokio::test]
async fn top_level_n_ctx_is_reported() {
    let server = MockServer::start().await;
    server.set_props(json!({"n_ctx": 4096}));
    assert_eq!(model(&server).context_window("m").await, Some(4096));
}

#[tokio::test]
async fn vllm_max_model_len_for_the_matching_id() {
    let server = MockServer::start().await;
    server.set_models(json!({"object": "list", "data": [
        {"id": "meta-llama/Llama-3.1-8B", "object": "model", "max_model_len": 131072},
        {"id": "Qwen/Qwen3-32B", "object": "model", "max_model_len": 32768}
    ]}));
    server.set_props(json!({"n_ctx": 1}));
    let m = model(&server);
    assert_eq!(m.context_window("Qwen/Qwen3-32B").await, Some(32768));
    // Found in the list: `/props` is never asked.
    assert_eq!(paths(&server), ["/v1/models"]);
}

#[tokio::test]
async fn openrouter_and_lm_studio_fields() {
    let server = MockServer::start().await;
    server.set_models(json!({"data": [
        {"id": "openai/gpt-4o", "context_length": 128000},
        {"id": "local-model", "max_context_length": 65536}
    ]}));
    let m = model(&server);
    assert_eq!(m.context_window("openai/gpt-4o").await, Some(128000));
    assert_eq!(m.context_window("local-model").await, Some(65536));
}

#[tokio::test]
async fn the_only_listed_model_stands_for_any_id() {
    let server = MockServer::start().await;
    server.set_models(json!({"data": [{"id": "served-name", "max_model_len": 16384}]}));
    assert_eq!(model(&server).context_window("my-alias").await, Some(16384));
}

#[tokio::test]
async fn no_window_when_both_answer_404() {
    let server = MockServer::start().await;
    let m = model(&server);
    assert_eq!(m.context_window("gpt-test").await, None);
    assert_eq!(paths(&server), ["/v1/models", "/props"]);
    // "Unknown" is an answer too: not asked again.
    assert_eq!(m.context_window("gpt-test").await, None);
    assert_eq!(paths(&server).len(), 2);
}

#[tokio::test]
async fn unusable_answers_give_none() {
    let server = MockServer::start().await;
    server.set_models(json!({"data": [{"id": "a"}, {"id": "b", "max_model_len": "lots"}]}));
    server.set_props(json!({"default_generation_settings": {"n_ctx": 0}}));
    assert_eq!(model(&server).context_window("b").await, None);
}

#[tokio::test]
async fn unreachable_server_gives_none() {
    let config = OpenAiConfig::new().with_base_url(format!("{}/v1", refused_uri()));
    let m = OpenAiModel::new(config).unwrap();
    assert_eq!(m.context_window("m").await, None);
}

#[tokio::test]
async fn silent_server_gives_none_after_the_short_timeout() {
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let holder = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let m =
        OpenAiModel::new(OpenAiConfig::new().with_base_url(format!("http://{addr}/v1"))).unwrap();
    let start = Instant::now();
    assert_eq!(m.context_window("m").await, None);
    let took = start.elapsed();
    // One 5 s limit for both endpoints, not the chat requests' ten minutes.
    assert!(took >= Duration::from_secs(5), "{took:?}");
    assert!(took < Duration::from_secs(9), "{took:?}");
    holder.abort();
}

#[tokio::test]
async fn asked_twice_the_server_sees_one_request() {
    let server = MockServer::start().await;
    server.set_models(json!({"data": [
        {"id": "a", "max_model_len": 1000},
        {"id": "b", "max_model_len": 2000}
    ]}));
    let m = model(&server);
    assert_eq!(m.context_window("a").await, Some(1000));
    assert_eq!(m.context_window("a").await, Some(1000));
    assert_eq!(paths(&server), ["/v1/models"]);
    // Callers asking at once share one request too.
    let (x, y) = tokio::join!(m.context_window("b"), m.context_window("b"));
    assert_eq!((x, y), (Some(2000), Some(2000)));
    assert_eq!(paths(&server), ["/v1/models", "/v1/models"]);
}

#[tokio::test]
async fn recording_model_passes_the_question_on() {
    let server = MockServer::start().await;
    server.set_props(json!({"default_generation_settings": {"n_ctx": 2048}}));
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn Model> = Arc::new(model(&server));
    let rec = RecordingModel::create(dir.path().join("c.jsonl"), inner).unwrap();
    assert_eq!(rec.context_window("m").await, Some(2048));
}
