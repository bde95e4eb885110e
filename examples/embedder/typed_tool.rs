//! A typed tool with one dependency on cadre (`cadre-core`) beside tokio: no `async-trait`,
//! `serde` or `schemars` in your `Cargo.toml`. `TypedTool::run` is a native `async fn`; the
//! input type derives its JSON Schema through cadre's re-exports (the `crate` attributes
//! tell the derives where those crates are).
//!
//! `ANTHROPIC_API_KEY=… cargo run -p cadre-embedder --example typed_tool -- Paris`

use cadre_core::{
    schemars, serde, AgentSpec, AnthropicConfig, Mode, Orchestrator, ToolContext, ToolError,
    TypedTool,
};

/// Reports the weather of a few cities (a stand-in for a real weather service).
struct GetWeather;

/// What `get_weather` takes; the schema the model is offered comes from this type.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(crate = "cadre_core::serde", deny_unknown_fields)]
#[schemars(crate = "cadre_core::schemars")]
struct WeatherInput {
    /// City name, e.g. Paris
    city: String,
}

impl TypedTool for GetWeather {
    type Input = WeatherInput;
    type Output = String;

    fn name(&self) -> &str {
        "get_weather"
    }

    fn description(&self) -> String {
        "Get today's weather for a city: temperature in °C, sky and chance of rain.".into()
    }

    fn is_read_only(&self) -> bool {
        true
    }

    async fn run(&self, input: WeatherInput, _ctx: &ToolContext) -> Result<String, ToolError> {
        Ok(match input.city.to_lowercase().as_str() {
            "paris" => "Paris: 9 °C, overcast, 70% chance of rain".into(),
            "lisbon" => "Lisbon: 18 °C, sunny, 5% chance of rain".into(),
            _ => format!("no weather data for {:?}; known: Paris, Lisbon", input.city),
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let city = std::env::args().nth(1).unwrap_or_else(|| "Paris".into());
    let weather = AgentSpec::builder("weather")
        .description("Says what to wear for today's weather in a city.")
        .mode(Mode::Primary)
        .tools(["get_weather"])
        .max_turns(4)
        .prompt("Call get_weather for the city, then say what to wear in two sentences.")
        .build();
    let orchestrator = Orchestrator::builder()
        .anthropic(AnthropicConfig::from_env()?)
        .workspace(std::env::temp_dir())
        .agent(weather)
        .tool(GetWeather)
        .build()?;
    let (outcome, _summary) = orchestrator.run("weather", &city).await?;
    println!("{}", outcome.text);
    Ok(())
}
