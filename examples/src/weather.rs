//! A custom-tool agent: it asks a `get_weather` tool and says what to wear.

use async_trait::async_trait;
use cadre_core::{no_events, Agent, AgentConfig, AgentOutcome, Budget, ToolSet};
use cadre_model::{Message, Model};
use cadre_tools::{parse_input, Tool, ToolContext, ToolError, ToolOutput, Workspace};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// Reports the weather of a few cities (a stand-in for a real weather service).
pub struct GetWeather;

#[derive(Deserialize)]
struct WeatherInput {
    city: String,
}

#[async_trait]
impl Tool for GetWeather {
    fn name(&self) -> &str {
        "get_weather"
    }

    fn description(&self) -> String {
        "Get today's weather for a city: temperature in °C, sky, wind and chance of rain.".into()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"}},
            "required": ["city"],
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        true
    }

    async fn call(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: WeatherInput = parse_input("get_weather", input)?;
        let report = match input.city.to_lowercase().as_str() {
            "paris" => "Paris: 9 °C, overcast, wind 20 km/h from the west, 70% chance of rain",
            "lisbon" => "Lisbon: 18 °C, sunny, light breeze, 5% chance of rain",
            "oslo" => "Oslo: -4 °C, light snow, wind 15 km/h, 60% chance of snow",
            _ => {
                return Ok(ToolOutput::error(format!(
                    "no weather data for {:?}; known cities: Paris, Lisbon, Oslo",
                    input.city
                )))
            }
        };
        Ok(ToolOutput::ok(report))
    }
}

/// The prompt the weather agent runs with.
pub const SYSTEM: &str = "You help people dress for the weather. Always call get_weather for \
the city first, then recommend what to wear in two or three short sentences.";

/// Asks the agent what to wear in `city`.
pub async fn what_to_wear(model: Arc<dyn Model>, city: &str) -> anyhow::Result<AgentOutcome> {
    // This agent needs no files; its workspace is an empty temporary folder.
    let scratch = tempfile::tempdir()?;
    let agent = Agent {
        config: AgentConfig {
            path: "weather".into(),
            agent_type: "weather".into(),
            model: cadre_model::DEFAULT_MODEL.into(),
            system: SYSTEM.into(),
            max_tokens: 1024,
            max_turns: 4,
            context_tokens: 200_000,
            compact_at: None,
        },
        model,
        tools: ToolSet::new([Arc::new(GetWeather) as Arc<dyn Tool>]),
        ctx: ToolContext::new(Arc::new(Workspace::new(scratch.path())?)),
        budget: Budget::new(None),
        events: no_events(),
        limiter: None,
        transcript: None,
        journal: None,
        inbox: None,
        permissions: None,
    };
    Ok(agent
        .run(vec![Message::user_text(format!(
            "What should I wear in {city} today?"
        ))])
        .await)
}
