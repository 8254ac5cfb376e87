//! Characters a reader cannot see, or that reorder what they see: what a value must not
//! hide behind when a person decides on it, and what a text must not hide a word with.

/// Whether `c` is invisible or reorders the text around it: zero-width and joining
/// characters, direction marks, embeddings, overrides and isolates, invisible operators,
/// fillers and blanks, other format characters, tags, variation selectors (which can
/// carry hidden data a byte each) but the two that pick an emoji's or a text's look,
/// the byte order mark, line and paragraph separators, and control characters other
/// than a newline or a tab.
pub fn is_unseen(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{0600}'..='\u{0605}'
                | '\u{061C}'
                | '\u{06DD}'
                | '\u{070F}'
                | '\u{08E2}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{17B4}'
                | '\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{2800}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0D}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{110BD}'
                | '\u{110CD}'
                | '\u{13430}'..='\u{1343F}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E007F}'
                | '\u{E0100}'..='\u{E01EF}'
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
            '\u{FE00}',
            '\u{E0100}',
            '\u{E01EF}',
            '\u{2800}',
        ] {
            assert!(is_unseen(c), "{:04X}", u32::from(c));
        }
        // The emoji and text presentation selectors are part of ordinary emoji (❤️).
        for c in [
            'a', 'é', 'ש', '日', ' ', '\n', '\t', '⟨', '\u{FE0E}', '\u{FE0F}',
        ] {
            assert!(!is_unseen(c), "{:04X}", u32::from(c));
        }
    }
}
