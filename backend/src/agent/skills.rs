//! Skills: `SKILL.md` files in a configured folder (`<folder>/<skill>/SKILL.md`, or
//! `<folder>/<skill>.md`). The first lines may give `name:` and `description:`; the
//! model sees the list and reads one on demand with the `read_skill` tool.

use std::path::{Path, PathBuf};

/// A skill the model may read: its name, what it is for, and its file.
#[derive(Clone, Debug, PartialEq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub path: PathBuf,
}

pub fn list(dir: &Path) -> Vec<Skill> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut skills: Vec<Skill> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let path = entry.path();
            let file = if path.is_dir() {
                path.join("SKILL.md")
            } else if path.extension().is_some_and(|e| e == "md") {
                path.clone()
            } else {
                return None;
            };
            let text = std::fs::read_to_string(&file).ok()?;
            let fallback = path.file_stem()?.to_string_lossy().into_owned();
            let (name, description) = header(&text, &fallback);
            Some(Skill {
                name,
                description,
                path: file,
            })
        })
        .collect();
    skills.sort_by(|a, b| a.name.cmp(&b.name));
    skills
}

fn header(text: &str, fallback: &str) -> (String, String) {
    let mut name = None;
    let mut description = None;
    for line in text.lines().take(20) {
        let line = line.trim();
        if let Some(value) = line.strip_prefix("name:") {
            name = Some(value.trim().to_owned());
        } else if let Some(value) = line.strip_prefix("description:") {
            description = Some(value.trim().to_owned());
        }
    }
    let description = description.unwrap_or_else(|| {
        text.lines()
            .map(|l| l.trim().trim_start_matches('#').trim())
            .find(|l| !l.is_empty() && *l != "---")
            .unwrap_or("")
            .to_owned()
    });
    (name.unwrap_or_else(|| fallback.to_owned()), description)
}

/// The text of the skill called `name`.
pub fn read(dir: &Path, name: &str) -> Option<String> {
    list(dir)
        .into_iter()
        .find(|s| s.name == name)
        .and_then(|s| std::fs::read_to_string(s.path).ok())
}
