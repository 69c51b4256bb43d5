//! Python's string predicates, where upstream's text cleaning relies on
//! them.

/// Python's `str.isspace` (and `\s` in its `re`): Unicode White_Space, and
/// the four information separators U+001C..U+001F, which Python's
/// `split()` also splits on.
pub(crate) fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1C}'..='\u{1F}').contains(&c)
}
