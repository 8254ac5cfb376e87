//! Characters a reader cannot see, or that reorder what they see: what a value must not
//! hide behind when a person decides on it, and what a text must not hide a word with.

/// Whether `c` is invisible or reorders the text around it: zero-width and joining
/// characters, direction marks, embeddings, overrides and isolates, invisible operators,
/// fillers, tags, the byte order mark, line and paragraph separators, and control
/// characters other than a newline or a tab.
pub fn is_unseen(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{061C}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{17B4}'
                | '\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E007F}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invisible_and_reordering_characters_are_unseen_and_text_is_not() {
        for c in [
            '\u{200B}',
            '\u{202E}',
            '\u{2066}',
            '\u{FEFF}',
            '\u{E0041}',
            '\u{7}',
            '\u{2028}',
        ] {
            assert!(is_unseen(c), "{:04X}", u32::from(c));
        }
        for c in ['a', 'é', 'ש', '日', ' ', '\n', '\t', '⟨'] {
            assert!(!is_unseen(c), "{:04X}", u32::from(c));
        }
    }
}
