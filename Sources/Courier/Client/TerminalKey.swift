/// A key read from a terminal in raw mode (`courier top`).
public enum TerminalKey: Equatable, Sendable {
    case up, down, pageUp, pageDown, home, end
    case character(Character)

    /// The keys in what a terminal sent (untrusted bytes: anything a user or a paste sends): arrows as escape sequences (`ESC [ A`, or `ESC O A` in
    /// application mode), anything else byte by byte (ASCII; other bytes are ignored).
    public static func parse(_ bytes: [UInt8]) -> [TerminalKey] {
        var keys: [TerminalKey] = []
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == 0x1B, index + 2 < bytes.count, bytes[index + 1] == UInt8(ascii: "[") || bytes[index + 1] == UInt8(ascii: "O") {
                let code = bytes[index + 2]
                let tilde = index + 3 < bytes.count && bytes[index + 3] == UInt8(ascii: "~")
                switch code {
                case UInt8(ascii: "A"): keys.append(.up)
                case UInt8(ascii: "B"): keys.append(.down)
                case UInt8(ascii: "H"): keys.append(.home)
                case UInt8(ascii: "F"): keys.append(.end)
                case UInt8(ascii: "5") where tilde: keys.append(.pageUp)
                case UInt8(ascii: "6") where tilde: keys.append(.pageDown)
                default: break
                }
                index += tilde ? 4 : 3
                continue
            }
            if byte >= 0x20 && byte < 0x7F { keys.append(.character(Character(Unicode.Scalar(byte)))) }
            index += 1
        }
        return keys
    }
}
