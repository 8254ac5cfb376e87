//! Approval before side effects: which calls of a tool wait for the user's yes, and
//! what the user may answer.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::fields::VisibleIf;

/// What the user may answer to an approval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Run the call with exactly the arguments shown.
    Approve,
    /// Run it with arguments the user changed.
    Edit,
    /// Do not run it; the model is told, with the user's message if any.
    Reject,
}

impl Decision {
    pub const ALL: [Decision; 3] = [Decision::Approve, Decision::Edit, Decision::Reject];

    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Edit => "edit",
            Decision::Reject => "reject",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Decision::ALL.into_iter().find(|d| d.as_str() == text)
    }
}

/// A tool's `requires_approval` when written as a table: when calls need approval and
/// which decisions the card offers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ApprovalSpec {
    /// Approval is needed when any of these holds for the call's arguments and filled
    /// values (`field` names either); empty means every call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub when: Vec<VisibleIf>,
    /// The answers offered; all three unless narrowed.
    #[serde(default = "all_decisions")]
    pub decisions: Vec<Decision>,
    /// Shown on the card; a default names the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

fn all_decisions() -> Vec<Decision> {
    Decision::ALL.to_vec()
}

impl Default for ApprovalSpec {
    fn default() -> Self {
        ApprovalSpec {
            when: Vec::new(),
            decisions: all_decisions(),
            reason: None,
        }
    }
}

impl ApprovalSpec {
    /// Whether a call with these values (arguments and filled fields) needs approval.
    /// Conditions are read leniently ([`VisibleIf::may_hold_for_a_service`]): when in
    /// doubt, the user is asked.
    pub fn applies_to(&self, values: &Map<String, Value>) -> bool {
        self.when.is_empty()
            || self
                .when
                .iter()
                .any(|rule| rule.may_hold_for_a_service(values))
    }

    pub fn allows(&self, decision: Decision) -> bool {
        self.decisions.contains(&decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_decide_which_calls_need_approval() {
        let spec: ApprovalSpec = serde_json::from_value(
            json!({"when": [{"field": "database", "equals": "production"}]}),
        )
        .expect("valid");
        let values = |db: &str| {
            json!({"database": db})
                .as_object()
                .cloned()
                .unwrap_or_default()
        };
        assert!(spec.applies_to(&values("production")));
        assert!(!spec.applies_to(&values("staging")));
        assert_eq!(spec.decisions, Decision::ALL);
        assert!(ApprovalSpec::default().applies_to(&Map::new()));
    }

    #[test]
    fn a_condition_cannot_be_dodged_by_writing_the_value_another_way() {
        let spec: ApprovalSpec = serde_json::from_value(json!({"when": [
            {"field": "database", "equals": "production"},
            {"field": "targets", "one_of": ["production", "billing"]},
            {"field": "amount", "equals": 5},
        ]}))
        .expect("valid");
        let needs = |values: Value| spec.applies_to(values.as_object().expect("object"));
        for asked in [
            json!({"database": "Production"}),
            json!({"database": " production\n"}),
            json!({"database": ["staging", "production"]}),
            json!({"database": [["production"]]}),
            // A multiselect's value is a list.
            json!({"targets": ["staging", "billing"]}),
            json!({"amount": 5.0}),
            json!({"amount": "5.00"}),
            json!({"amount": [5]}),
            json!({"amount": "\u{FF15}"}),
            json!({"database": "produ\u{200B}ction"}),
            json!({"database": "staging,production"}),
            json!({"database": "ＰＲＯＤＵＣＴＩＯＮ"}),
            // Styled letters a service's compatibility normalisation reads as plain
            // ones, and look-alikes and small capitals a person reads so.
            json!({"database": "\u{1D429}\u{1D42B}\u{1D428}\u{1D41D}\u{1D42E}\u{1D41C}\u{1D42D}\u{1D422}\u{1D428}\u{1D427}"}),
            json!({"database": "ⓟⓡⓞⓓⓤⓒⓣⓘⓞⓝ"}),
            json!({"database": "🄿🅁🄾🄳🅄🄲🅃🄸🄾🄽"}),
            json!({"database": "рrоduсtiоn"}),
            json!({"database": "ᴘʀᴏᴅᴜᴄᴛɪᴏɴ"}),
            json!({"amount": "\u{1D7D3}"}),
            json!({"amount": "⑤"}),
            json!({"amount": "\u{2075}"}),
            json!({"database": "produ\u{E0080}ction\u{FFF0}"}),
            json!({"database": "PRODUCTIO\u{039D}"}),
            json!({"database": "pr\u{00BA}ducti\u{1D52}n"}),
            json!({"database": "\u{1D56}\u{02B3}\u{1D52}\u{1D48}\u{1D58}\u{1D9C}\u{1D57}\u{2071}\u{1D52}\u{207F}"}),
            // Anything else normalisation changes may read as the value: a ligature.
            json!({"database": "producti\u{FB01}n"}),
            // An object where a value was expected could mean anything.
            json!({"database": {"name": "production"}}),
            // A service may read a name loosely (Go's encoding/json ignores case).
            json!({"Database": "production"}),
            json!({"data_base ": "production"}),
            json!({"data\u{200B}base": "production"}),
            json!({"ｄａｔａｂａｓｅ": "production"}),
            json!({"dаtabase": "production"}),
            json!({"databaſe": "production"}),
            json!({"data.base": "production"}),
            json!({"data＿base": "production"}),
            json!({"database": "staging", "DATABASE": "production"}),
        ] {
            assert!(needs(asked.clone()), "{asked} slipped past the condition");
        }
        for not_asked in [
            json!({"database": "staging"}),
            json!({"database": ["staging"]}),
            json!({"database": "production-copy"}),
            json!({"targets": []}),
            json!({"amount": 6}),
            json!({"databases": "production"}),
            json!({}),
        ] {
            assert!(!needs(not_asked.clone()), "{not_asked} needed approval");
        }
        // A rule naming a whole list still matches that list.
        let listed: ApprovalSpec =
            serde_json::from_value(json!({"when": [{"field": "targets", "equals": ["a", "b"]}]}))
                .expect("valid");
        let values = json!({"targets": ["a", "b"]});
        assert!(listed.applies_to(values.as_object().expect("object")));
        // A rule in another script holds in either case, look-alikes read alike.
        let cyrillic: ApprovalSpec =
            serde_json::from_value(json!({"when": [{"field": "env", "equals": "прод"}]}))
                .expect("valid");
        for asked in ["прод", "Прод", "ПРОД", "npoд"] {
            let values = json!({ "env": asked });
            assert!(
                cyrillic.applies_to(values.as_object().expect("object")),
                "{asked} slipped past the condition"
            );
        }
    }

    #[test]
    fn a_condition_on_any_value_sees_the_field_under_another_spelling() {
        let spec: ApprovalSpec =
            serde_json::from_value(json!({"when": [{"field": "force"}]})).expect("valid");
        let needs = |values: Value| spec.applies_to(values.as_object().expect("object"));
        assert!(needs(json!({"Force": true})));
        assert!(needs(json!({"FORCE": "yes"})));
        assert!(!needs(json!({"Force": false})));
        assert!(!needs(json!({"forced": true})));
    }

    /// A condition on any value holds for whatever a service testing the value itself
    /// (`if (args.force)`, `if args.get("force")`) takes as true, not only for what a
    /// person would call given.
    #[test]
    fn a_condition_on_any_value_holds_for_what_a_service_takes_as_true() {
        let spec: ApprovalSpec =
            serde_json::from_value(json!({"when": [{"field": "force"}]})).expect("valid");
        let needs =
            |value: Value| spec.applies_to(json!({"force": value}).as_object().expect("object"));
        for truthy in [
            json!(" "),
            json!([]),
            json!({}),
            json!("false"),
            json!("0"),
            json!(-1),
            json!(0.5),
        ] {
            assert!(needs(truthy.clone()), "{truthy} slipped past the condition");
        }
        for falsy in [json!(null), json!(false), json!("")] {
            assert!(!needs(falsy.clone()), "{falsy} was taken as set");
        }
        // Named as `true` or `false`: whatever a service may take for that.
        let forced: ApprovalSpec =
            serde_json::from_value(json!({"when": [{"field": "force", "equals": true}]}))
                .expect("valid");
        let wet: ApprovalSpec =
            serde_json::from_value(json!({"when": [{"field": "dry_run", "equals": false}]}))
                .expect("valid");
        let needs = |spec: &ApprovalSpec, name: &str, value: &Value| {
            spec.applies_to(json!({ name: value }).as_object().expect("object"))
        };
        for truthy in [
            json!(1),
            json!("yes"),
            json!("on"),
            json!([]),
            json!({}),
            json!(" "),
        ] {
            assert!(
                needs(&forced, "force", &truthy),
                "force = {truthy} slipped past"
            );
        }
        for falsy in [json!(0), json!(""), json!([]), json!({}), json!(null)] {
            assert!(
                needs(&wet, "dry_run", &falsy),
                "dry_run = {falsy} slipped past"
            );
        }
        assert!(!needs(&forced, "force", &json!(0)));
        assert!(!needs(&wet, "dry_run", &json!(1)));
        // Left out, `dry_run` is false to `if (!args.dry_run)`; `force` is not true.
        let left_out = json!({"path": "/"});
        assert!(wet.applies_to(left_out.as_object().expect("object")));
        assert!(!forced.applies_to(left_out.as_object().expect("object")));
        let look_alike = json!({"DryRun": true});
        assert!(wet.applies_to(look_alike.as_object().expect("object")));
    }

    #[test]
    fn decisions_can_be_narrowed() {
        let spec: ApprovalSpec =
            serde_json::from_value(json!({"decisions": ["approve", "reject"]})).expect("valid");
        assert!(!spec.allows(Decision::Edit));
        assert!(serde_json::from_value::<ApprovalSpec>(json!({"decisions": ["maybe"]})).is_err());
    }
}
