//! An MCP tool result as the model sees it: text joined, images as image blocks, other
//! content described in a line, `isError` kept.

use cadre_tools::{ToolImage, ToolOutput};
use rmcp::model::CallToolResult;
use serde_json::Value;

/// Image types the Messages API accepts; others are described instead of sent.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// Turns `result` from server `server` into a tool output. The result is read through its
/// JSON form so content kinds added to the protocol later degrade to a described line.
pub fn to_output(server: &str, result: CallToolResult) -> ToolOutput {
    let json = serde_json::to_value(&result).unwrap_or(Value::Null);
    let is_error = json
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut texts: Vec<String> = Vec::new();
    let mut images = Vec::new();
    let items = json
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for item in &items {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        let str_of = |key: &str| {
            item.get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        match kind {
            "text" => texts.push(str_of("text")),
            "image" if IMAGE_TYPES.contains(&str_of("mimeType").as_str()) => {
                images.push(ToolImage {
                    media_type: str_of("mimeType"),
                    data: str_of("data"),
                })
            }
            "image" | "audio" => texts.push(format!(
                "[{kind} content of type {} not shown]",
                str_of("mimeType")
            )),
            "resource" => {
                let resource = item.get("resource").cloned().unwrap_or(Value::Null);
                let uri = resource.get("uri").and_then(Value::as_str).unwrap_or("");
                match resource.get("text").and_then(Value::as_str) {
                    Some(text) => texts.push(format!("[resource {uri}]\n{text}")),
                    None => texts.push(format!("[binary resource {uri} not shown]")),
                }
            }
            "resource_link" => texts.push(format!(
                "[resource link {}: {}]",
                str_of("name"),
                str_of("uri")
            )),
            other => texts.push(format!("[{other} content not shown]")),
        }
    }
    // A server that answers only with structured content still says something.
    if items.is_empty() {
        if let Some(structured) = json.get("structuredContent").filter(|v| !v.is_null()) {
            texts.push(structured.to_string());
        }
    }
    let mut content = texts.join("\n");
    if content.trim().is_empty() && images.is_empty() {
        content = if is_error {
            format!("MCP server {server:?} reported an error without a message")
        } else {
            "(no output)".to_owned()
        };
    }
    ToolOutput {
        content,
        is_error,
        images,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(json: Value) -> CallToolResult {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn text_images_and_other_content() {
        let out = to_output(
            "s",
            result(serde_json::json!({"content": [
                {"type": "text", "text": "a"},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "image", "data": "AAAA", "mimeType": "image/tiff"},
                {"type": "resource", "resource": {"uri": "file:///x", "text": "hello"}},
                {"type": "text", "text": "b"}
            ]})),
        );
        assert!(!out.is_error);
        assert_eq!(
            out.content,
            "a\n[image content of type image/tiff not shown]\n[resource file:///x]\nhello\nb"
        );
        assert_eq!(
            out.images,
            [ToolImage {
                media_type: "image/png".into(),
                data: "AAAA".into()
            }]
        );
    }

    #[test]
    fn errors_and_empty_results() {
        let out = to_output(
            "s",
            result(serde_json::json!({"content": [], "isError": true})),
        );
        assert!(out.is_error);
        assert!(out.content.contains("\"s\" reported an error"));
        let out = to_output(
            "s",
            result(serde_json::json!({"content": [], "structuredContent": {"n": 1}})),
        );
        assert_eq!(out.content, "{\"n\":1}");
    }
}
