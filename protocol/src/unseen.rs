//! Characters a reader cannot see, that reorder what they see, or that they take for
//! Latin letters: what a value must not hide behind when a person decides on it, and
//! what a text must not hide a word with.

/// Whether `c` is invisible or reorders the text around it: zero-width and joining
/// characters, direction marks, embeddings, overrides and isolates, invisible operators,
/// fillers and blanks, other format characters, tags, variation selectors (which can
/// carry hidden data a byte each) but the two that pick an emoji's or a text's look,
/// the byte order mark, line and paragraph separators, control characters other than
/// a newline or a tab, and every other character Unicode says to draw as nothing
/// unless a font knows it (the default-ignorable ones, reserved ones included).
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
                | '\u{0890}'
                | '\u{0891}'
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
                | '\u{FFF0}'..='\u{FFFB}'
                | '\u{110BD}'
                | '\u{110CD}'
                | '\u{13430}'..='\u{1343F}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                // Tags, variation selectors and the rest of the plane's first block: all
                // ignorable by default, drawn as nothing.
                | '\u{E0000}'..='\u{E0FFF}'
        )
}

/// `text` as a person deciding on it must read it: each character they cannot see, or
/// that reorders what they see ([`is_unseen`]), written out as `⟨U+XXXX⟩`; and so each
/// letter or digit that only looks Latin ([`as_latin`]) in a word that would pass for a
/// Latin one: a word that also holds Latin letters (`acmе.com` with a Cyrillic `е`), or,
/// in a text with no letters of another script of their own, a word whose letters all
/// look Latin (`раураӏ`). In a text of another script (`Привет`, `рука и нога`) such a
/// word is an ordinary one and left as it is. Words end at ASCII spaces and line breaks
/// only: a thin or hair space must not cut a word in two.
pub fn written_out(text: &str) -> String {
    if text
        .bytes()
        .all(|b| b.is_ascii_graphic() || matches!(b, b' ' | b'\n' | b'\t'))
    {
        return text.to_owned();
    }
    let poses_as_latin = |c: char| !c.is_ascii() && as_latin(c).is_ascii_alphanumeric();
    let of_another_script =
        |c: char| !c.is_ascii() && c.is_alphabetic() && !poses_as_latin(c) && !is_combining(c);
    let another_script = text.chars().any(of_another_script);
    let mut out = String::with_capacity(text.len() + 16);
    for word in text.split_inclusive(|c: char| c.is_ascii_whitespace()) {
        let passes_for_latin = word.chars().any(poses_as_latin)
            && (word.chars().any(|c| c.is_ascii_alphabetic()) || !another_script);
        for c in word.chars() {
            if is_unseen(c) || (passes_for_latin && poses_as_latin(c)) {
                out.push_str(&format!("⟨U+{:04X}⟩", u32::from(c)));
            } else {
                out.push(c);
            }
        }
    }
    out
}

/// Whether `c` is a combining mark, which sits on the letter before it and is no letter
/// of a script of its own (Unicode counts some, as `ͅ`, alphabetic).
fn is_combining(c: char) -> bool {
    matches!(
        c,
        '\u{0300}'..='\u{036F}'
            | '\u{0483}'..='\u{0489}'
            | '\u{1AB0}'..='\u{1AFF}'
            | '\u{1DC0}'..='\u{1DFF}'
            | '\u{20D0}'..='\u{20FF}'
            | '\u{FE20}'..='\u{FE2F}'
    )
}

/// A name as a service that matches names loosely may read it: in lower case, look-alike
/// and fullwidth letters as the Latin ones they imitate, the long s as `s` (Go's and
/// .NET's case-insensitive matching fold it so), and only letters and digits, so that
/// `Account_ID`, `account-id `, `accountId` and `ａｃｃｏｕｎｔ＿ｉｄ` are one name.
pub fn name_key(name: &str) -> String {
    name.chars()
        .map(folded)
        .filter(|c| c.is_alphanumeric())
        .collect()
}

/// `c` as a reader, or a service that reads loosely, takes it, in lower case: as the
/// Latin letter or digit it imitates ([`as_latin`]) in its own case first (`Ν` as `n`),
/// else in lower case (`П` as `п`, so `n`); otherwise its lower case. The one reading
/// that names, the words of a question and approval conditions all go by.
pub fn folded(c: char) -> char {
    let read = as_latin(c);
    if read.is_ascii() {
        return read;
    }
    as_latin(c.to_lowercase().next().unwrap_or(c))
}

/// The ASCII character a reader takes `c` for, in lower case: fullwidth forms,
/// mathematical letters and digits (bold, italic, script, fraktur, double-struck,
/// sans-serif, monospace, with those of them among the letterlike symbols), circled and
/// squared letters, circled, superscript and subscript digits as their ASCII, Cyrillic
/// and Greek letters and small capitals that look like Latin ones as those; anything
/// else as itself, ASCII lower-cased.
pub fn as_latin(c: char) -> char {
    // Most text is ASCII, and the server reads every message of a conversation through
    // here on every step: no ASCII character stands for another.
    if c.is_ascii() {
        return c.to_ascii_lowercase();
    }
    let code = u32::from(c);
    let c = match c {
        '\u{FF01}'..='\u{FF5E}' => char::from_u32(code - 0xFEE0).unwrap_or(c),
        // Runs of A–Z then a–z.
        '\u{1D400}'..='\u{1D6A3}' => {
            let index = (code - 0x1D400) % 52;
            let base = if index < 26 { 'A' } else { 'a' };
            char::from_u32(u32::from(base) + index % 26).unwrap_or(c)
        }
        // Mathematical digits: runs of 0–9 (bold, double-struck, sans-serif, …).
        '\u{1D7CE}'..='\u{1D7FF}' => {
            char::from_u32(u32::from('0') + (code - 0x1D7CE) % 10).unwrap_or(c)
        }
        // Circled and squared letters (outlined and filled), and circled digits.
        '\u{24B6}'..='\u{24CF}' => char::from_u32(u32::from('a') + code - 0x24B6).unwrap_or(c),
        '\u{24D0}'..='\u{24E9}' => char::from_u32(u32::from('a') + code - 0x24D0).unwrap_or(c),
        '\u{1F130}'..='\u{1F149}' => char::from_u32(u32::from('a') + code - 0x1F130).unwrap_or(c),
        '\u{1F150}'..='\u{1F169}' => char::from_u32(u32::from('a') + code - 0x1F150).unwrap_or(c),
        '\u{1F170}'..='\u{1F189}' => char::from_u32(u32::from('a') + code - 0x1F170).unwrap_or(c),
        '\u{2460}'..='\u{2468}' => char::from_u32(u32::from('1') + code - 0x2460).unwrap_or(c),
        '\u{24EA}' => '0',
        // Superscript and subscript digits.
        '\u{2070}' | '\u{2080}' => '0',
        '\u{00B9}' | '\u{2081}' => '1',
        '\u{00B2}' | '\u{2082}' => '2',
        '\u{00B3}' | '\u{2083}' => '3',
        '\u{2074}'..='\u{2079}' => char::from_u32(u32::from('4') + code - 0x2074).unwrap_or(c),
        '\u{2084}'..='\u{2089}' => char::from_u32(u32::from('4') + code - 0x2084).unwrap_or(c),
        // Letterlike symbols: the mathematical alphabets' letters that live here.
        'ℂ' => 'c',
        'ℊ' => 'g',
        'ℋ' | 'ℌ' | 'ℍ' | 'ℎ' => 'h',
        'ℐ' | 'ℑ' => 'i',
        'ℒ' | 'ℓ' => 'l',
        'ℕ' => 'n',
        'ℙ' => 'p',
        'ℚ' => 'q',
        'ℛ' | 'ℜ' | 'ℝ' => 'r',
        'ℤ' | 'ℨ' => 'z',
        'ℬ' => 'b',
        'ℭ' => 'c',
        'ℰ' | 'ℯ' => 'e',
        'ℱ' => 'f',
        'ℳ' => 'm',
        'ℴ' => 'o',
        '\u{212A}' => 'k',
        '\u{212B}' => 'a',
        'а' | 'А' | 'α' | 'Α' | 'ᴀ' => 'a',
        'ʙ' => 'b',
        'ᴄ' => 'c',
        'ꜰ' => 'f',
        'ɢ' => 'g',
        'ʜ' => 'h',
        'ᴊ' => 'j',
        'ᴋ' => 'k',
        'ʟ' => 'l',
        'ᴍ' => 'm',
        'ᴏ' => 'o',
        'ʀ' => 'r',
        'ꜱ' => 's',
        'ᴛ' => 't',
        'ᴜ' => 'u',
        'ᴠ' => 'v',
        'ᴡ' => 'w',
        'ʏ' => 'y',
        'ᴢ' => 'z',
        // Letters written small above or below the line (`ᵖʳᵒᵈ`, `ₚ`), ordinals and
        // Roman numerals: compatibility normalisation reads them as the plain ones.
        'ᵃ' | 'ₐ' | 'ª' => 'a',
        'ᵇ' => 'b',
        'ᶜ' | 'ⅽ' | 'Ⅽ' => 'c',
        'ᵈ' | 'ⅾ' | 'Ⅾ' => 'd',
        'ᵉ' | 'ₑ' => 'e',
        'ᶠ' => 'f',
        'ᵍ' => 'g',
        'ʰ' | 'ₕ' => 'h',
        'ⁱ' | 'ᵢ' | 'ⅰ' | 'Ⅰ' => 'i',
        'ʲ' | 'ⱼ' => 'j',
        'ᵏ' | 'ₖ' => 'k',
        'ˡ' | 'ₗ' | 'ⅼ' | 'Ⅼ' => 'l',
        'ᵐ' | 'ₘ' | 'ⅿ' | 'Ⅿ' => 'm',
        'ⁿ' | 'ₙ' => 'n',
        'ᵒ' | 'ₒ' | 'º' => 'o',
        'ᵖ' | 'ₚ' => 'p',
        'ʳ' | 'ᵣ' => 'r',
        'ˢ' | 'ₛ' | 'ſ' => 's',
        'ᵗ' | 'ₜ' => 't',
        'ᵘ' | 'ᵤ' => 'u',
        'ᵛ' | 'ᵥ' | 'ⅴ' | 'Ⅴ' => 'v',
        'ʷ' => 'w',
        'ˣ' | 'ₓ' | 'ⅹ' | 'Ⅹ' => 'x',
        'ʸ' => 'y',
        'ᶻ' => 'z',
        'ɑ' => 'a',
        'В' | 'Β' => 'b',
        'М' | 'Μ' => 'm',
        'Η' => 'h',
        'Ζ' => 'z',
        'Υ' => 'y',
        'с' | 'С' | 'ϲ' => 'c',
        'ԁ' | 'Ԁ' | 'ᴅ' => 'd',
        'е' | 'Е' | 'ё' | 'ε' | 'Ε' | 'ᴇ' => 'e',
        'һ' | 'Н' => 'h',
        'і' | 'І' | 'ӏ' | 'Ӏ' | 'ı' | 'ι' | 'Ι' | 'ɪ' | 'ї' => 'i',
        'ј' | 'Ј' => 'j',
        'к' | 'К' | 'κ' | 'Κ' => 'k',
        'Ν' | 'η' | 'п' | 'ɴ' => 'n',
        'о' | 'О' | 'ο' | 'Ο' | 'σ' => 'o',
        'р' | 'Р' | 'ρ' | 'Ρ' | 'ᴘ' => 'p',
        'ԛ' => 'q',
        'ѕ' | 'Ѕ' => 's',
        'т' | 'Т' | 'τ' | 'Τ' => 't',
        'υ' | 'ս' => 'u',
        'ν' | 'ѵ' => 'v',
        'ԝ' | 'ω' => 'w',
        'х' | 'Х' | 'χ' | 'Χ' => 'x',
        'у' | 'У' | 'γ' => 'y',
        _ => c,
    };
    c.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_reads_as_its_own_lower_case_and_look_alikes_as_latin() {
        for byte in 0..=127u8 {
            let c = char::from(byte);
            assert_eq!(as_latin(c), c.to_ascii_lowercase(), "{c:?}");
        }
        assert_eq!(as_latin('А'), 'a');
        assert_eq!(as_latin('\u{FF21}'), 'a');
    }

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
            '\u{0890}',
            // Default-ignorable, drawn as nothing: reserved ones too, which a later
            // Unicode may give a meaning but no look.
            '\u{E0080}',
            '\u{E0200}',
            '\u{E0FFF}',
            '\u{FFF0}',
            '\u{FFF8}',
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

    #[test]
    fn what_a_reader_cannot_see_is_written_out() {
        // An override that shows `exe.txt` for `txt.exe`, a zero-width space in a host,
        // an isolate, a line separator, a tag character.
        assert_eq!(
            written_out("report\u{202E}txt.exe"),
            "report⟨U+202E⟩txt.exe"
        );
        assert_eq!(written_out("pay\u{200B}pal.com"), "pay⟨U+200B⟩pal.com");
        assert_eq!(
            written_out("a\u{2066}b\u{2069}\u{2028}c\u{E0041}\u{7}"),
            "a⟨U+2066⟩b⟨U+2069⟩⟨U+2028⟩c⟨U+E0041⟩⟨U+0007⟩"
        );
        // What a reader sees is left alone: new lines, tabs, accents, other scripts.
        let plain = "select *\n\tfrom t -- café, שלום, 日本, Привет John, prix\u{202F}:";
        assert_eq!(written_out(plain), plain);
    }

    /// A word that mixes Latin letters with letters that only look like them passes for
    /// the Latin word: `cfo@acmе.com` mails a look-alike domain.
    #[test]
    fn look_alike_letters_among_latin_ones_are_written_out() {
        assert_eq!(written_out("cfo@acm\u{0435}.com"), "cfo@acm⟨U+0435⟩.com");
        assert_eq!(
            written_out("to \u{1D429}ay 5\u{FF10}"),
            "to ⟨U+1D429⟩ay 5⟨U+FF10⟩"
        );
        // Only the mixed word: the Cyrillic one beside it stays as it is.
        assert_eq!(written_out("Привет paypa\u{04CF}"), "Привет paypa⟨U+04CF⟩");
        // A word of look-alikes alone, and one cut by a hair space, pass for Latin too.
        assert_eq!(
            written_out("\u{0440}\u{0430}\u{0443}\u{0440}\u{0430}\u{04CF}"),
            "⟨U+0440⟩⟨U+0430⟩⟨U+0443⟩⟨U+0440⟩⟨U+0430⟩⟨U+04CF⟩"
        );
        assert_eq!(
            written_out("\u{0440}\u{200A}aypal"),
            "⟨U+0440⟩\u{200A}aypal"
        );
        // Words with letters of their own script stay as they are, and so do words of
        // look-alikes alone in a text of that script.
        assert_eq!(written_out("6-значный код"), "6-значный код");
        assert_eq!(written_out("рука и нога"), "рука и нога");
        // A combining mark is no letter of a script of its own.
        assert_eq!(
            written_out("\u{0440}\u{0430}\u{0443}\u{0440}\u{0430}\u{04CF}\u{0345}"),
            "⟨U+0440⟩⟨U+0430⟩⟨U+0443⟩⟨U+0440⟩⟨U+0430⟩⟨U+04CF⟩\u{0345}"
        );
        // Control characters in plain ASCII are written out too.
        assert_eq!(written_out("paypal\u{7F}.com"), "paypal⟨U+007F⟩.com");
    }

    #[test]
    fn names_a_service_may_take_for_one_have_one_key() {
        for spelling in [
            "Account_ID",
            "account-id ",
            "accountId",
            "account.id",
            "ａｃｃｏｕｎｔ＿ｉｄ",
            "аccount_id",
            "ACCOUNT\u{200B}_ID",
            "\u{212A}ey_account_id",
        ] {
            let expected = if spelling.starts_with('\u{212A}') {
                "keyaccountid"
            } else {
                "accountid"
            };
            assert_eq!(name_key(spelling), expected, "{spelling:?}");
        }
        assert_eq!(name_key("databaſe"), name_key("database"));
        // A capital read in its own case: Greek `Ν` is `n`, though `ν` reads `v`.
        assert_eq!(name_key("\u{039D}AME"), "name");
        assert_eq!(name_key("\u{041F}"), "n");
        assert_ne!(name_key("databases"), name_key("database"));
    }

    #[test]
    fn look_alikes_read_as_the_latin_letters_they_imitate() {
        let read = |text: &str| text.chars().map(as_latin).collect::<String>();
        assert_eq!(read("Раssword"), "password");
        assert_eq!(read("ＰＩＮ"), "pin");
        assert_eq!(read("\u{1D42D}oken"), "token");
        assert_eq!(read("ᴘᴀꜱꜱᴡᴏʀᴅ"), "password");
        assert_eq!(read("ⓅⒾⓃ ①②③"), "pin 123");
        assert_eq!(read("\u{1D7D0}\u{1D7E3} ℎℯ"), "21 he");
        assert_eq!(read("été"), "été");
        assert_eq!(read("ᵖʳᵒᵈ ⅽ"), "prod c");
    }
}
