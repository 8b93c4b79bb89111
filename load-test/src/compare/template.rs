//! Command templates: split on whitespace (no shell), each word with its
//! `{name}` placeholders filled in; unknown placeholders are found before the
//! first run.

/// replaced by its value in every word.
pub fn expand(template: &str, values: &[(&str, String)]) -> Vec<String> {
    template
        .split_whitespace()
        .map(|word| {
            values.iter().fold(word.to_string(), |w, (name, value)| {
                w.replace(&format!("{{{name}}}"), value)
            })
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// The `{name}` placeholders of `template` that are not in `known`: a typo
/// would otherwise reach the tracker as a literal argument.
pub fn unknown_placeholders(template: &str, known: &[&str]) -> Vec<String> {
    let mut unknown = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        rest = &rest[open + 1..];
        let Some(close) = rest.find('}') else { break };
        let name = &rest[..close];
        if !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !known.contains(&name)
            && !unknown.iter().any(|u: &String| u == name)
        {
            unknown.push(name.to_string());
        }
    }
    unknown
}

pub(super) fn check_placeholders(what: &str, template: &str, known: &[&str]) -> Result<(), String> {
    let unknown = unknown_placeholders(template, known);
    if unknown.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{what}: unknown placeholder(s) {{{}}}; known: {{{}}}",
        unknown.join("}, {"),
        known.join("}, {")
    ))
}

/// Placeholders of our tracker's command template.
pub(super) const OUR_PLACEHOLDERS: [&str; 6] =
    ["tracker", "addr", "workers", "cpus", "pin", "config"];
/// Placeholders of another tracker's command template: it pins itself, or
/// not, as its own configuration says.
pub(super) const OTHER_PLACEHOLDERS: [&str; 3] = ["addr", "workers", "cpus"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_expand_word_by_word() {
        let words = expand(
            "{tracker} --udp {addr}  --workers {workers} {pin}",
            &[
                ("tracker", "/x/tracker".into()),
                ("addr", "127.0.0.1:1".into()),
                ("workers", "3".into()),
                ("pin", "--no-pin".into()),
            ],
        );
        assert_eq!(
            words,
            [
                "/x/tracker",
                "--udp",
                "127.0.0.1:1",
                "--workers",
                "3",
                "--no-pin"
            ]
        );
    }

    #[test]
    fn a_placeholder_inside_a_word_is_filled_in() {
        let words = expand(
            "taskset -c {cpus} aquatic_udp -c /d/aquatic-{workers}.toml",
            &[("cpus", "8-15".into()), ("workers", "4".into())],
        );
        assert_eq!(
            words,
            [
                "taskset",
                "-c",
                "8-15",
                "aquatic_udp",
                "-c",
                "/d/aquatic-4.toml"
            ]
        );
    }

    #[test]
    fn unknown_placeholders_are_found() {
        let known = ["addr", "workers", "cpus"];
        assert!(unknown_placeholders("x -c a-{workers}.toml {addr} {cpus}", &known).is_empty());
        assert_eq!(
            unknown_placeholders("x {worker} {pin} {worker} {addr}", &known),
            ["worker", "pin"]
        );
        // Braces that are no placeholder (JSON, shell-like text) are left alone.
        assert!(unknown_placeholders("x {} {\"a\":1} {a b} {", &known).is_empty());
        let err = check_placeholders("--other a", "x {worker}", &known).unwrap_err();
        assert_eq!(
            err,
            "--other a: unknown placeholder(s) {worker}; known: {addr}, {workers}, {cpus}"
        );
    }
}
