//! A stand-in for QuickBooks Online's Profit and Loss report, with made-up figures that
//! depend only on the company id and the dates, so a demo gives stable answers.

use axum::extract::{Path, Query};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{Error, FieldErrors, Result};
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route(
        "/demo/quickbooks/v3/company/{realm_id}/reports/ProfitAndLoss",
        get(profit_and_loss),
    )
}

#[derive(Deserialize)]
struct Period {
    start_date: Option<String>,
    end_date: Option<String>,
}

async fn profit_and_loss(
    Path(realm_id): Path<String>,
    Query(period): Query<Period>,
    headers: HeaderMap,
) -> Result<Json<Value>> {
    if !headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("Bearer "))
    {
        return Err(Error::Unauthorized(
            "a Bearer access token is required".into(),
        ));
    }
    if !(10..=20).contains(&realm_id.len()) || !realm_id.bytes().all(|b| b.is_ascii_digit()) {
        let fields = FieldErrors::from([("realm_id".to_owned(), "10 to 20 digits".to_owned())]);
        return Err(Error::unprocessable("unknown company", fields));
    }
    let start = period.start_date.unwrap_or_else(|| "2025-01-01".into());
    let end = period.end_date.unwrap_or_else(|| "2025-03-31".into());
    // A stable pseudo-random scale from the inputs (FNV-1a).
    let seed = format!("{realm_id}{start}{end}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
    let scale = 0.8 + (seed % 400) as f64 / 1000.0;
    let round = |x: f64| (x * scale * 100.0).round() / 100.0;
    let (sales, services) = (round(84_250.0), round(21_400.0));
    let (payroll, rent, software) = (round(52_300.0), round(9_000.0), round(3_850.0));
    let income = ((sales + services) * 100.0).round() / 100.0;
    let expenses = ((payroll + rent + software) * 100.0).round() / 100.0;
    Ok(Json(json!({
        "Header": {
            "ReportName": "ProfitAndLoss",
            "StartPeriod": start,
            "EndPeriod": end,
            "Currency": "USD",
            "Option": [{"Name": "SampleData", "Value": "true"}],
            "RealmId": realm_id,
        },
        "Summary": {
            "TotalIncome": income,
            "TotalExpenses": expenses,
            "NetIncome": ((income - expenses) * 100.0).round() / 100.0,
        },
        "Rows": {
            "Income": [{"Account": "Sales", "Amount": sales}, {"Account": "Services", "Amount": services}],
            "Expenses": [
                {"Account": "Payroll", "Amount": payroll},
                {"Account": "Rent", "Amount": rent},
                {"Account": "Software", "Amount": software}
            ],
        },
        "Note": "Sample data from toolgate's demo mode, not a real QuickBooks company.",
    })))
}
