//! A small MCP server that ships with toolgate, so the example tools file shows MCP on a
//! machine with no network: `toolgate mcp-demo` serves a sample calendar over stdio.
//! `plan_meeting` asks the user for the details through elicitation (the durable card),
//! `cancel_meeting` is marked destructive (so it waits for approval), `list_rooms` only
//! reads. Everything it answers is labelled sample data.

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, ElicitationSchema, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

const ROOMS: [(&str, &str); 3] = [
    ("fjord", "Fjord (6 seats, screen)"),
    ("harbour", "Harbour (12 seats, video)"),
    ("attic", "Attic (4 seats, quiet)"),
];

/// The sample calendar: meetings drafted in this session.
#[derive(Clone, Default)]
struct DemoCalendar {
    meetings: Arc<Mutex<Vec<String>>>,
}

fn schema(value: Value) -> Arc<Map<String, Value>> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "plan_meeting",
            "Plan a meeting: drafts an invitation after asking you for the date and time, the length, who comes and the room (sample calendar)",
            schema(json!({"type": "object", "properties": {
                "topic": {"type": "string", "description": "What the meeting is about"},
                "organizer_email": {"type": "string", "description": "Who sends the invitation"}
            }})),
        )
        .annotate(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "list_rooms",
            "List the meeting rooms of the sample calendar",
            schema(json!({"type": "object", "properties": {}})),
        )
        .annotate(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "cancel_meeting",
            "Cancel a meeting of the sample calendar by its number",
            schema(json!({"type": "object", "properties": {
                "meeting": {"type": "integer", "description": "The meeting's number, from plan_meeting"}
            }, "required": ["meeting"]})),
        )
        .annotate(ToolAnnotations::new().read_only(false).destructive(true)),
    ]
}

fn text(message: impl Into<String>) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(message)]).into()
}

fn meeting_form() -> Result<ElicitationSchema, ErrorData> {
    let rooms: Vec<Value> = ROOMS
        .iter()
        .map(|(value, title)| json!({"const": value, "title": title}))
        .collect();
    let mut form: ElicitationSchema = serde_json::from_value(json!({
        "type": "object",
        "properties": {
            "starts": {"type": "string", "format": "date-time", "title": "Starts", "description": "Date and time of the meeting"},
            "minutes": {"type": "integer", "title": "Length in minutes", "minimum": 15, "maximum": 240, "default": 30},
            "attendees": {"type": "array", "title": "Who comes", "items": {"type": "string", "enum": ["Ada", "Grace", "Linus", "Margaret"]}, "minItems": 1},
            "room": {"type": "string", "title": "Room", "oneOf": rooms},
            "video": {"type": "boolean", "title": "Add a video link", "default": true}
        },
        "required": ["starts", "attendees", "room"]
    }))
    .map_err(|err| ErrorData::internal_error(err.to_string(), None))?;
    form.property_order = Some(
        ["starts", "minutes", "attendees", "room", "video"]
            .map(str::to_owned)
            .to_vec(),
    );
    Ok(form)
}

impl DemoCalendar {
    async fn plan_meeting(
        &self,
        arguments: &Map<String, Value>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let topic = arguments
            .get("topic")
            .and_then(Value::as_str)
            .unwrap_or("a meeting");
        let answer = context
            .peer
            .create_elicitation(ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: format!("When and with whom should {topic} happen?"),
                requested_schema: meeting_form()?,
            })
            .await
            .map_err(|err| ErrorData::internal_error(err.to_string(), None))?;
        let details = match (answer.action, answer.content) {
            (ElicitationAction::Accept, Some(details)) => details,
            (ElicitationAction::Decline, _) => {
                return Ok(text(
                    "No meeting planned: you declined to give the details.",
                ));
            }
            _ => return Ok(text("No meeting planned: the form was dismissed.")),
        };
        let field = |name: &str| details.get(name).cloned().unwrap_or(Value::Null);
        let attendees: Vec<String> = field("attendees")
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        let room = ROOMS
            .iter()
            .find(|(value, _)| field("room").as_str() == Some(value))
            .map_or("a room", |(_, title)| title);
        let mut meetings = self
            .meetings
            .lock()
            .map_err(|_| ErrorData::internal_error("the calendar is unavailable", None))?;
        let invitation = format!(
            "Sample calendar: meeting {} drafted: {topic}, {} for {} minutes in {room} with {}{}{}.",
            meetings.len() + 1,
            field("starts").as_str().unwrap_or("?"),
            field("minutes").as_i64().unwrap_or(30),
            attendees.join(", "),
            if field("video") == Value::Bool(false) {
                ""
            } else {
                ", with a video link"
            },
            arguments
                .get("organizer_email")
                .and_then(Value::as_str)
                .map(|email| format!(", sent from {email}"))
                .unwrap_or_default(),
        );
        meetings.push(invitation.clone());
        Ok(text(invitation))
    }

    fn cancel_meeting(&self, arguments: &Map<String, Value>) -> CallToolResponse {
        let number = arguments
            .get("meeting")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let known = self.meetings.lock().map(|m| m.len()).unwrap_or(0) as u64;
        if number == 0 || number > known {
            return CallToolResult::error(vec![ContentBlock::text(format!(
                "Sample calendar: there is no meeting {number}"
            ))])
            .into();
        }
        text(format!("Sample calendar: meeting {number} cancelled."))
    }
}

impl ServerHandler for DemoCalendar {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "toolgate-demo-calendar",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "A sample calendar for trying toolgate's MCP support; nothing is real.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.clone().unwrap_or_default();
        match request.name.as_ref() {
            "plan_meeting" => self.plan_meeting(&arguments, context).await,
            "list_rooms" => Ok(text(format!(
                "Sample calendar rooms: {}",
                ROOMS.map(|(_, title)| title).join("; ")
            ))),
            "cancel_meeting" => Ok(self.cancel_meeting(&arguments)),
            other => Err(ErrorData::invalid_params(
                format!("there is no tool `{other}`"),
                None,
            )),
        }
    }
}

/// Serves the sample calendar on standard input and output until the client leaves.
pub async fn serve_stdio() -> anyhow::Result<()> {
    let running = DemoCalendar::default()
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|err| anyhow::anyhow!("starting the demo MCP server: {err}"))?;
    running
        .waiting()
        .await
        .map_err(|err| anyhow::anyhow!("the demo MCP server stopped: {err}"))?;
    Ok(())
}
