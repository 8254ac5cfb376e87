//! Server-sent events as a chat-completions endpoint streams its answer: the bytes as
//! they arrive, split into events, each event's `data` lines joined (comments, `event`,
//! `id` and `retry` lines are skipped). Each byte is looked at once, whatever the
//! chunks, and no event may grow past a bound: an endpoint that never ends a line costs
//! no more than that, in memory or in time.

/// An event (or one of its lines) grew past the bound its reader was given.
#[derive(Debug, PartialEq, Eq)]
pub struct EventTooLong;

/// One event: its type (`event:`, empty when it names none) and its data.
#[derive(Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: Vec<u8>,
    pub data: Vec<u8>,
}

/// Splits the bytes of an event stream into events. Lines end with a line feed, a
/// carriage return, or both, as the format allows.
pub struct EventReader {
    /// Bytes of the line not yet ended.
    line: Vec<u8>,
    /// The event's type so far.
    kind: Vec<u8>,
    /// The event's data so far, its lines joined by line feeds.
    data: Vec<u8>,
    /// Whether the event has a `data` line (an empty one counts).
    has_data: bool,
    /// The last line ended with a carriage return: a line feed right after it ends
    /// nothing more.
    after_cr: bool,
    /// Nothing has been read yet (a byte order mark there is dropped).
    at_start: bool,
    /// Most bytes an event's type, data and unfinished line may hold together.
    most: usize,
}

impl EventReader {
    pub fn new(most: usize) -> Self {
        EventReader {
            line: Vec::new(),
            kind: Vec::new(),
            data: Vec::new(),
            has_data: false,
            after_cr: false,
            at_start: true,
            most,
        }
    }

    /// Takes the next bytes of the stream; hands `each` every event they complete, in
    /// order, and stops at the first error `each` returns.
    pub fn feed<E>(
        &mut self,
        mut bytes: &[u8],
        mut each: impl FnMut(Event) -> Result<(), E>,
    ) -> Result<(), E>
    where
        E: From<EventTooLong>,
    {
        if bytes.is_empty() {
            return Ok(());
        }
        if std::mem::take(&mut self.at_start) {
            // The stream's first bytes, whole: a byte order mark cut across two chunks
            // is not looked for (no endpoint sends one so).
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        }
        if std::mem::take(&mut self.after_cr) && bytes.first() == Some(&b'\n') {
            bytes = &bytes[1..];
        }
        while !bytes.is_empty() {
            let end = bytes.iter().position(|byte| matches!(byte, b'\n' | b'\r'));
            let piece = &bytes[..end.unwrap_or(bytes.len())];
            if self.kind.len() + self.data.len() + self.line.len() + piece.len() > self.most {
                return Err(EventTooLong.into());
            }
            self.line.extend_from_slice(piece);
            let Some(end) = end else {
                break;
            };
            let ended_by_cr = bytes[end] == b'\r';
            bytes = &bytes[end + 1..];
            if ended_by_cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            if let Some(event) = self.end_line() {
                each(event)?;
            }
        }
        Ok(())
    }

    /// The stream has ended: the event it was in the middle of, if it has data (an
    /// endpoint may end without the blank line after its last event, `[DONE]` above
    /// all). Data cut off within its JSON fails where it is read.
    pub fn finish(&mut self) -> Option<Event> {
        if !self.line.is_empty() {
            let _ = self.end_line();
        }
        self.end_line()
    }

    /// The line ends: a field is taken, or a blank line ends the event (if it has
    /// data; one without is no event).
    fn end_line(&mut self) -> Option<Event> {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            let kind = std::mem::take(&mut self.kind);
            let data = std::mem::take(&mut self.data);
            return std::mem::take(&mut self.has_data).then_some(Event { kind, data });
        }
        let (field, value) = match line.iter().position(|byte| *byte == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (&line[..], &[][..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => value.clone_into(&mut self.kind),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each event as `type|data` (`data` alone when it names no type).
    fn events_of(chunks: &[&[u8]], most: usize) -> Result<Vec<String>, EventTooLong> {
        let mut reader = EventReader::new(most);
        let mut events = Vec::new();
        for chunk in chunks {
            reader.feed(chunk, |event| {
                let data = String::from_utf8_lossy(&event.data);
                events.push(if event.kind.is_empty() {
                    data.into_owned()
                } else {
                    format!("{}|{data}", String::from_utf8_lossy(&event.kind))
                });
                Ok::<_, EventTooLong>(())
            })?;
        }
        Ok(events)
    }

    #[test]
    fn events_are_read_whatever_the_chunks_and_line_endings() {
        let stream = b": a comment\r\nevent: ping\ndata: {\"a\":1}\n\ndata:two\ndata: lines\r\n\r\nid: 7\n\ndata: cr\rdata: only\r\rdata: [DONE]\n\n";
        let whole = events_of(&[stream], 1024).expect("events");
        assert_eq!(
            whole,
            ["ping|{\"a\":1}", "two\nlines", "cr\nonly", "[DONE]"]
        );
        // Byte by byte (a CRLF cut between its two bytes among them), the same events.
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events_of(&bytes, 1024).expect("events"), whole);
        // An empty chunk between a CR and its LF ends no second line.
        assert_eq!(
            events_of(&[b"data: a\r", b"", b"\ndata: b\n\n"], 1024).expect("events"),
            ["a\nb"]
        );
        // A byte order mark first is dropped.
        assert_eq!(
            events_of(&[b"\xEF\xBB\xBFdata: x\n\n"], 1024).expect("events"),
            ["x"]
        );
        // An event not yet ended is not handed on until the stream ends; a comment
        // left unended at the end is nothing.
        let mut reader = EventReader::new(1024);
        reader
            .feed(b"data: [DONE]", |_| Err(EventTooLong))
            .expect("no event");
        let last = reader.finish().expect("the last event");
        assert_eq!(last.data, b"[DONE]");
        assert_eq!(reader.finish(), None);
        let mut reader = EventReader::new(1024);
        reader
            .feed(b"data: x\n\n: bye", |_| Ok::<_, EventTooLong>(()))
            .expect("an event");
        assert_eq!(reader.finish(), None);
    }

    #[test]
    fn an_event_or_line_past_the_bound_is_refused() {
        // A line that never ends.
        let endless = [b'x'; 64];
        assert_eq!(
            events_of(&[&endless[..30], &endless[30..]], 50),
            Err(EventTooLong)
        );
        // Many short data lines of one event.
        let many = b"data: 0123456789\n".repeat(10);
        assert_eq!(events_of(&[&many], 50), Err(EventTooLong));
        // Events each within the bound, however many.
        let events = b"data: 0123456789\n\n".repeat(100);
        assert_eq!(events_of(&[&events], 50).expect("events").len(), 100);
    }
}
