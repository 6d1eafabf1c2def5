extension StringProtocol where UTF8View: BidirectionalCollection {
    /// The text without leading and trailing ASCII whitespace (space, tab, CR, LF, VT, FF).
    /// A byte-level trim for machine text (tokens, receipt lines, header values): much cheaper
    /// than Foundation's `trimmingCharacters(in:)`, which bridges through NSString on Linux.
    func trimmingASCIIWhitespace() -> SubSequence {
        let bytes = utf8
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || (0x09...0x0D).contains(byte) }
        guard let first = bytes.firstIndex(where: { !isSpace($0) }) else { return self[endIndex..<endIndex] }
        let last = bytes.lastIndex(where: { !isSpace($0) }) ?? first
        return self[first...last]
    }
}

/// Splits UTF-8 text into its lines (LF, CRLF or CR), each trimmed of ASCII whitespace, empty
/// ones dropped. Works on bytes: for receipts of thousands of lines.
func asciiLines(_ bytes: some Collection<UInt8>) -> [String] {
    bytes.split(whereSeparator: { $0 == 0x0A || $0 == 0x0D }).compactMap { line in
        let text = String(decoding: line, as: UTF8.self).trimmingASCIIWhitespace()
        return text.isEmpty ? nil : String(text)
    }
}
