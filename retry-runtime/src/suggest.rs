//! "Did you mean": the known name closest to a mistyped one, for the hints of configuration
//! errors and of a lookup of an unknown upstream.
//!
//! The distance is Levenshtein's (one insertion, deletion or substitution each), counted on the
//! lower-cased name; a candidate is suggested only within a third of its length (at least one
//! edit), so a hint names a likely typo rather than the least unlike name.

/// The name of `candidates` closest to `unknown`, if close enough to be a likely typo.
pub(crate) fn closest<'a>(
    unknown: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let unknown = unknown.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (edit_distance(&unknown, c), c))
        .filter(|(d, c)| *d <= (c.len() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}
