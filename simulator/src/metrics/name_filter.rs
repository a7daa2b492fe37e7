//! `name[]` filters on `/metrics`, as `prometheus_client` serves them over a registry of
//! ordinary collectors: a scraper asks only for the sample names it reads and gets a page of
//! a few hundred bytes instead of tens of KB. Shared by the simulator and the cost
//! benchmark's upstream, so both answer a filtered scrape the way such a server does (vLLM
//! may ignore the query and answer the whole page; SGLang's multiprocess registry answers an
//! empty one).

/// The page restricted to the query's `name[]` values, or `None` when it has none.
pub fn restrict_to_query(text: &str, query: Option<&str>) -> Option<String> {
    requested_names(query).map(|names| restrict(text, &names))
}

/// The `name[]` values of a query string (percent-decoded), if any.
pub fn requested_names(query: Option<&str>) -> Option<Vec<String>> {
    let names: Vec<String> = query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(key, _)| matches!(*key, "name[]" | "name%5B%5D" | "name%5b%5d"))
        .map(|(_, value)| percent_decode(value))
        .collect();
    (!names.is_empty()).then_some(names)
}

fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (byte, hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(decoded)) => {
                out.push(decoded);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Keeps the sample lines whose name is requested, and the comment lines of their families.
pub fn restrict(text: &str, names: &[String]) -> String {
    let wanted = |name: &str| names.iter().any(|n| n == name);
    let family_wanted = |family: &str| {
        names.iter().any(|n| {
            n.strip_prefix(family).is_some_and(|rest| {
                rest.is_empty() || ["_total", "_bucket", "_sum", "_count", "_created"].contains(&rest)
            })
        })
    };
    let mut out = String::new();
    for line in text.lines() {
        let keep = match line.strip_prefix("# ") {
            Some(comment) => comment.split_whitespace().nth(1).is_some_and(family_wanted),
            None => wanted(line.split(['{', ' ']).next().unwrap_or_default()),
        };
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_filters_keep_only_the_requested_samples() {
        let text = "# HELP vllm:num_requests_waiting W\n# TYPE vllm:num_requests_waiting gauge\n\
vllm:num_requests_waiting{model_name=\"m\"} 2.0\nvllm:num_requests_running{model_name=\"m\"} 1.0\n\
# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total{model_name=\"m\"} 5.0\n";
        let names = requested_names(Some("name[]=vllm:num_requests_waiting&name%5B%5D=vllm%3Aprefix_cache_hits_total"))
            .unwrap();
        let kept = restrict(text, &names);
        assert!(kept.contains("vllm:num_requests_waiting{"));
        assert!(kept.contains("vllm:prefix_cache_hits_total{"));
        assert!(kept.contains("# TYPE vllm:prefix_cache_hits counter"));
        assert!(!kept.contains("running"));
        assert_eq!(requested_names(Some("other=1")), None);
        assert_eq!(requested_names(None), None);
    }
}
