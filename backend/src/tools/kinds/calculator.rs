//! `calculator`: arithmetic without a network, so a demo has a tool that always works.
//! `+ - * / % ^`, parentheses, unary minus, and sqrt, abs, round, floor, ceil.

use serde_json::{Value, json};

/// Longest expression accepted, and deepest nesting: bounded work for any input.
const MAX_LEN: usize = 500;
const MAX_DEPTH: usize = 64;

pub fn run(arguments: &serde_json::Map<String, Value>) -> Result<Value, String> {
    let expression = arguments
        .get("expression")
        .and_then(Value::as_str)
        .ok_or("`expression` is required")?;
    let value = evaluate(expression)?;
    Ok(json!({ "expression": expression, "value": value }))
}

pub fn evaluate(expression: &str) -> Result<f64, String> {
    if expression.len() > MAX_LEN {
        return Err(format!(
            "the expression is longer than {MAX_LEN} characters"
        ));
    }
    let mut parser = Parser {
        chars: expression.chars().filter(|c| !c.is_whitespace()).collect(),
        pos: 0,
        depth: 0,
    };
    let value = parser.sum()?;
    if parser.pos != parser.chars.len() {
        return Err(format!("unexpected `{}`", parser.chars[parser.pos]));
    }
    if !value.is_finite() {
        return Err("the result is not a finite number".to_owned());
    }
    Ok(value)
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn sum(&mut self) -> Result<f64, String> {
        let mut value = self.product()?;
        while let Some(op @ ('+' | '-')) = self.peek() {
            self.pos += 1;
            let rhs = self.product()?;
            value = if op == '+' { value + rhs } else { value - rhs };
        }
        Ok(value)
    }

    fn product(&mut self) -> Result<f64, String> {
        let mut value = self.power()?;
        while let Some(op @ ('*' | '/' | '%')) = self.peek() {
            self.pos += 1;
            let rhs = self.power()?;
            value = match op {
                '*' => value * rhs,
                _ if rhs == 0.0 => return Err("division by zero".to_owned()),
                '/' => value / rhs,
                _ => value % rhs,
            };
        }
        Ok(value)
    }

    fn power(&mut self) -> Result<f64, String> {
        let base = self.unary()?;
        if self.peek() == Some('^') {
            self.pos += 1;
            let exponent = self.power()?;
            return Ok(base.powf(exponent));
        }
        Ok(base)
    }

    fn unary(&mut self) -> Result<f64, String> {
        match self.peek() {
            Some('-') => {
                self.pos += 1;
                Ok(-self.unary()?)
            }
            Some('+') => {
                self.pos += 1;
                self.unary()
            }
            _ => self.atom(),
        }
    }

    fn atom(&mut self) -> Result<f64, String> {
        match self.peek() {
            Some('(') => {
                self.depth += 1;
                if self.depth > MAX_DEPTH {
                    return Err("the expression is nested too deeply".to_owned());
                }
                self.pos += 1;
                let value = self.sum()?;
                if self.peek() != Some(')') {
                    return Err("missing `)`".to_owned());
                }
                self.pos += 1;
                self.depth -= 1;
                Ok(value)
            }
            Some(c) if c.is_ascii_digit() || c == '.' => {
                let start = self.pos;
                while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '.') {
                    self.pos += 1;
                }
                let text: String = self.chars[start..self.pos].iter().collect();
                text.parse()
                    .map_err(|_| format!("`{text}` is not a number"))
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.pos;
                while self.peek().is_some_and(|c| c.is_ascii_alphabetic()) {
                    self.pos += 1;
                }
                let name: String = self.chars[start..self.pos].iter().collect();
                let function: fn(f64) -> f64 = match name.as_str() {
                    "sqrt" => f64::sqrt,
                    "abs" => f64::abs,
                    "round" => f64::round,
                    "floor" => f64::floor,
                    "ceil" => f64::ceil,
                    _ => return Err(format!("unknown function `{name}`")),
                };
                if self.peek() != Some('(') {
                    return Err(format!("`{name}` needs parentheses"));
                }
                Ok(function(self.atom()?))
            }
            Some(c) => Err(format!("unexpected `{c}`")),
            None => Err("the expression ended too early".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::evaluate;

    #[test]
    fn precedence_parentheses_and_functions() {
        assert_eq!(evaluate("1 + 2 * 3").ok(), Some(7.0));
        assert_eq!(evaluate("(1 + 2) * 3").ok(), Some(9.0));
        assert_eq!(evaluate("2 ^ 3 ^ 2").ok(), Some(512.0));
        assert_eq!(evaluate("-sqrt(16) + abs(-2)").ok(), Some(-2.0));
        assert_eq!(evaluate("10 % 4").ok(), Some(2.0));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        for bad in [
            "",
            "1 +",
            "(1",
            "1 / 0",
            "2 $ 3",
            "foo(1)",
            "1..2",
            &"(".repeat(100),
        ] {
            assert!(evaluate(bad).is_err(), "{bad}");
        }
    }
}
