//! A custom typed tool and an agent type defined in code, run through the orchestrator
//! builder: the agent asks a `get_weather` tool and says what to wear.

use cadre_core::{AgentOutcome, AgentSpec, Mode, Orchestrator};
use cadre_model::Model;
use cadre_tools::{ToolContext, ToolError, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use std::path::Path;
use std::sync::Arc;

/// Reports the weather of a few cities (a stand-in for a real weather service).
pub struct GetWeather;

/// What `get_weather` takes; its JSON Schema, offered to the model, comes from this type.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WeatherInput {
    /// City name, e.g. Paris
    pub city: String,
}

impl TypedTool for GetWeather {
    type Input = WeatherInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        "get_weather"
    }

    fn description(&self) -> String {
        "Get today's weather for a city: temperature in °C, sky, wind and chance of rain.".into()
    }

    fn is_read_only(&self) -> bool {
        true
    }

    async fn run(&self, input: WeatherInput, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
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

/// The `weather` agent type, defined in code rather than in a YAML file: only the
/// `get_weather` tool, no skills, a few turns.
pub fn weather_agent() -> AgentSpec {
    AgentSpec::builder("weather")
        .description("Says what to wear for today's weather in a city.")
        .mode(Mode::Primary)
        .tools(["get_weather"])
        .skills(Vec::<String>::new())
        .max_turns(4)
        .prompt(SYSTEM)
        .build()
}

/// An orchestrator with the `weather` type and its tool, working in `workspace`.
pub fn orchestrator(model: Arc<dyn Model>, workspace: &Path) -> anyhow::Result<Arc<Orchestrator>> {
    Ok(Orchestrator::builder()
        .model(model)
        .workspace(workspace)
        .agent(weather_agent())
        .tool(GetWeather)
        .build()?)
}

/// Asks the `weather` agent of `orchestrator` what to wear in `city`.
pub async fn what_to_wear(
    orchestrator: &Arc<Orchestrator>,
    city: &str,
) -> anyhow::Result<AgentOutcome> {
    let task = format!("What should I wear in {city} today?");
    let (outcome, _summary) = orchestrator.run("weather", &task).await?;
    Ok(outcome)
}
