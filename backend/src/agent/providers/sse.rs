//! Server-sent events as a chat-completions endpoint streams its answer: the bytes as
//! they arrive, split into events, each event's `data` lines joined (comments, `event`,
//! `id` and `retry` lines are skipped). Each byte is looked at once, whatever the
//! chunks, and no event may grow past a bound: an endpoint that never ends a line costs
//! no more than that, in memory or in time.

/// An event (or one of its lines) grew past the bound its reader was given.
#[derive(Debug, PartialEq, Eq)]
pub struct EventTooLong;

/// Splits the bytes of an event stream into events' data.
pub struct EventReader {
    /// Bytes of the line not yet ended.
    line: Vec<u8>,
    /// The event's data so far, its lines joined by line feeds.
    data: Vec<u8>,
    /// Whether the event has a `data` line (an empty one counts).
    has_data: bool,
    /// Most bytes an event's data and its unfinished line may hold together.
    most: usize,
}

impl EventReader {
    pub fn new(most: usize) -> Self {
        EventReader {
            line: Vec::new(),
            data: Vec::new(),
            has_data: false,
            most,
        }
    }

    /// Takes the next bytes of the stream; hands `each` the data of every event they
    /// complete, in order, and stops at the first error `each` returns.
    pub fn feed<E>(
        &mut self,
        mut bytes: &[u8],
        mut each: impl FnMut(Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E>
    where
        E: From<EventTooLong>,
    {
        while !bytes.is_empty() {
            let end = bytes.iter().position(|byte| *byte == b'\n');
            let piece = &bytes[..end.unwrap_or(bytes.len())];
            if self.data.len() + self.line.len() + piece.len() > self.most {
                return Err(EventTooLong.into());
            }
            self.line.extend_from_slice(piece);
            let Some(end) = end else {
                break;
            };
            bytes = &bytes[end + 1..];
            if let Some(data) = self.end_line() {
                each(data)?;
            }
        }
        Ok(())
    }

    /// The line ends: a field is taken, or a blank line ends the event (its data, if
    /// it has any).
    fn end_line(&mut self) -> Option<Vec<u8>> {
        let mut line = std::mem::take(&mut self.line);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.is_empty() {
            let data = std::mem::take(&mut self.data);
            return std::mem::take(&mut self.has_data).then_some(data);
        }
        let (field, value) = match line.iter().position(|byte| *byte == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (&line[..], &[][..]),
        };
        if field == b"data" {
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events_of(chunks: &[&[u8]], most: usize) -> Result<Vec<String>, EventTooLong> {
        let mut reader = EventReader::new(most);
        let mut events = Vec::new();
        for chunk in chunks {
            reader.feed(chunk, |data| {
                events.push(String::from_utf8_lossy(&data).into_owned());
                Ok::<_, EventTooLong>(())
            })?;
        }
        Ok(events)
    }

    #[test]
    fn events_are_read_whatever_the_chunks() {
        let stream = b": a comment\r\nevent: message\ndata: {\"a\":1}\n\ndata:two\ndata: lines\r\n\r\nid: 7\n\ndata: [DONE]\n\n";
        let whole = events_of(&[stream], 1024).expect("events");
        assert_eq!(whole, ["{\"a\":1}", "two\nlines", "[DONE]"]);
        // Byte by byte, the same events.
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events_of(&bytes, 1024).expect("events"), whole);
        // An event not yet ended is not handed on.
        assert_eq!(
            events_of(&[b"data: half"], 1024).expect("events"),
            Vec::<String>::new()
        );
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
