//! Where a value sits in the configuration file, for the location of every error.

use std::path::Path;

use toml::Spanned;

use super::errors::Location;

/// Byte offsets to 1-based lines and character columns.
pub(super) struct Lines<'a> {
    text: &'a str,
    source: &'a Path,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    pub(super) fn new(text: &'a str, source: &'a Path) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Lines {
            text,
            source,
            starts,
        }
    }

    pub(super) fn at(&self, offset: usize) -> Location {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= offset);
        let start = self.starts.get(line.wrapping_sub(1)).copied().unwrap_or(0);
        let column = self
            .text
            .get(start..offset)
            .map_or(0, |s| s.chars().count())
            + 1;
        Location::file(self.source, line.max(1), column)
    }

    pub(super) fn value<T>(&self, spanned: &Spanned<T>) -> Location {
        self.at(spanned.span().start)
    }
}
