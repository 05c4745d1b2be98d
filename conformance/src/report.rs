//! Suite results: a readable text report and JUnit XML (hand-written: one small format, no
//! dependency), so CI systems can show each case.

use std::fmt::Write as _;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
    /// The plugin does not offer the case's feature: a legitimate answer, neither a pass nor a
    /// failure (serving features a plugin may not implement).
    Declined(String),
}

#[derive(Debug, Clone)]
pub struct CaseResult {
    /// `abi`, `gating`, `numeric`; JUnit's test-suite name.
    pub suite: String,
    /// e.g. `libfoo.so::null_arguments`.
    pub name: String,
    pub outcome: Outcome,
    /// Measurements and notes shown under the case.
    pub details: Vec<String>,
    pub duration: Duration,
}

#[derive(Debug, Clone, Default)]
pub struct Report {
    pub cases: Vec<CaseResult>,
}

impl Report {
    pub fn push(&mut self, case: CaseResult) {
        self.cases.push(case);
    }

    pub fn extend(&mut self, other: Report) {
        self.cases.extend(other.cases);
    }

    pub fn failures(&self) -> usize {
        self.cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Fail(_)))
            .count()
    }

    pub fn skipped(&self) -> usize {
        self.cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Skip(_)))
            .count()
    }

    pub fn declined(&self) -> usize {
        self.cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Declined(_)))
            .count()
    }

    pub fn passed(&self) -> usize {
        self.cases.len() - self.failures() - self.skipped() - self.declined()
    }

    /// One line per case, details indented, a summary last.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let mut suite = "";
        for case in &self.cases {
            if case.suite != suite {
                suite = &case.suite;
                let _ = writeln!(out, "== {suite}");
            }
            let (tag, why) = match &case.outcome {
                Outcome::Pass => ("PASS", None),
                Outcome::Fail(m) => ("FAIL", Some(m)),
                Outcome::Skip(m) => ("SKIP", Some(m)),
                Outcome::Declined(m) => ("DECLINED", Some(m)),
            };
            let _ = writeln!(
                out,
                "{tag} {} ({:.1} ms)",
                case.name,
                case.duration.as_secs_f64() * 1e3
            );
            if let Some(why) = why {
                for line in why.lines() {
                    let _ = writeln!(out, "     {line}");
                }
            }
            for d in &case.details {
                let _ = writeln!(out, "     {d}");
            }
        }
        let _ = write!(
            out,
            "{} passed, {} failed, {} skipped",
            self.passed(),
            self.failures(),
            self.skipped()
        );
        if self.declined() > 0 {
            let _ = write!(out, ", {} declined", self.declined());
        }
        out.push('\n');
        out
    }

    /// JUnit XML: one `<testsuite>` per suite name, in first-appearance order.
    pub fn junit_xml(&self) -> String {
        let mut suites: Vec<&str> = Vec::new();
        for c in &self.cases {
            if !suites.contains(&c.suite.as_str()) {
                suites.push(&c.suite);
            }
        }
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(
            out,
            "<testsuites name=\"ragged-conformance\" tests=\"{}\" failures=\"{}\" skipped=\"{}\">",
            self.cases.len(),
            self.failures(),
            self.skipped() + self.declined()
        );
        for suite in suites {
            let cases: Vec<&CaseResult> = self.cases.iter().filter(|c| c.suite == suite).collect();
            let failures = cases
                .iter()
                .filter(|c| matches!(c.outcome, Outcome::Fail(_)))
                .count();
            let skipped = cases
                .iter()
                .filter(|c| matches!(c.outcome, Outcome::Skip(_) | Outcome::Declined(_)))
                .count();
            let time: f64 = cases.iter().map(|c| c.duration.as_secs_f64()).sum();
            let _ = writeln!(
                out,
                "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\" time=\"{time:.6}\">",
                xml_escape(suite),
                cases.len()
            );
            for c in cases {
                let _ = write!(
                    out,
                    "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.6}\"",
                    xml_escape(suite),
                    xml_escape(&c.name),
                    c.duration.as_secs_f64()
                );
                let body = match &c.outcome {
                    Outcome::Pass => None,
                    Outcome::Fail(m) => Some(format!(
                        "      <failure message=\"{}\">{}</failure>\n",
                        xml_escape(m.lines().next().unwrap_or("")),
                        xml_escape(m)
                    )),
                    Outcome::Skip(m) => {
                        Some(format!("      <skipped message=\"{}\"/>\n", xml_escape(m)))
                    }
                    Outcome::Declined(m) => Some(format!(
                        "      <skipped message=\"declined: {}\"/>\n",
                        xml_escape(m)
                    )),
                };
                let details = (!c.details.is_empty()).then(|| {
                    format!(
                        "      <system-out>{}</system-out>\n",
                        xml_escape(&c.details.join("\n"))
                    )
                });
                if body.is_none() && details.is_none() {
                    out.push_str("/>\n");
                } else {
                    out.push_str(">\n");
                    out.push_str(&body.unwrap_or_default());
                    out.push_str(&details.unwrap_or_default());
                    out.push_str("    </testcase>\n");
                }
            }
            out.push_str("  </testsuite>\n");
        }
        out.push_str("</testsuites>\n");
        out
    }
}

/// Escapes the five XML special characters and spells characters XML 1.0 cannot carry at all
/// (control characters other than tab, newline, carriage return; U+FFFE, U+FFFF) as a visible
/// `\u{..}`, so that a plugin's stray control byte in a message neither breaks the report nor
/// vanishes from it.
pub fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(ch),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_quotes_and_control_characters() {
        assert_eq!(
            xml_escape("a<b & \"c\" 'd'>\u{1}"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;\\u{1}"
        );
    }

    #[test]
    fn junit_counts_and_nests_cases_by_suite() {
        let case = |suite: &str, name: &str, outcome| CaseResult {
            suite: suite.into(),
            name: name.into(),
            outcome,
            details: vec![],
            duration: Duration::from_millis(2),
        };
        let mut r = Report::default();
        r.push(case("abi", "ok", Outcome::Pass));
        r.push(case("abi", "bad<1>", Outcome::Fail("x > y".into())));
        r.push(case("numeric", "gpu", Outcome::Skip("no device".into())));
        let xml = r.junit_xml();
        assert!(
            xml.contains(
                "<testsuites name=\"ragged-conformance\" tests=\"3\" failures=\"1\" skipped=\"1\">"
            ),
            "{xml}"
        );
        assert!(
            xml.contains("<testsuite name=\"abi\" tests=\"2\" failures=\"1\" skipped=\"0\""),
            "{xml}"
        );
        assert!(xml.contains("name=\"bad&lt;1&gt;\""), "{xml}");
        assert!(
            xml.contains("<failure message=\"x &gt; y\">x &gt; y</failure>"),
            "{xml}"
        );
        assert!(xml.contains("<skipped message=\"no device\"/>"), "{xml}");
        assert_eq!((r.passed(), r.failures(), r.skipped()), (1, 1, 1));
        assert!(r.text().ends_with("1 passed, 1 failed, 1 skipped\n"));
    }
}
