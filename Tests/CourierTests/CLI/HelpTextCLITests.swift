import CourierTestSupport
import Foundation
import Testing

/// Help text without doubled defaults (issue 14, item 11): an option whose help names its
/// default must not also get ArgumentParser's "(default: …)".
@Suite("courier help (the built courier binary)")
struct HelpTextCLITests {
    static let commands: [[String]] = [
        ["deliver"], ["get"], ["enqueue"], ["agent"], ["list"], ["status"], ["pause"], ["resume"], ["cancel"],
        ["discard"], ["priority"], ["content", "list"], ["content", "path"], ["content", "delete"], ["package", "create"],
        ["package", "inspect"], ["package", "install"], ["receipt", "verify"], ["receipt", "entitlements"],
        ["sandbox", "init"], ["sandbox", "purchase"], ["prestage"], ["serve"],
    ]

    @Test("no option's help says its default twice")
    func noDoubledDefaults() throws {
        let doubled = try NSRegularExpression(pattern: #"\(default[^)]*\)[^()]{0,3}\(default: [^)]*\)"#)
        for command in Self.commands {
            let result = try CourierBinary.run(["help"] + command)
            #expect(result.status == 0, "\(command): \(result.stderr)")
            let text = result.stdout.split(whereSeparator: \.isWhitespace).joined(separator: " ")
            let range = NSRange(text.startIndex..., in: text)
            let match = doubled.firstMatch(in: text, range: range).flatMap { Range($0.range, in: text) }.map { String(text[$0]) }
            #expect(match == nil, "\(command.joined(separator: " ")): \(match ?? "")")
        }
    }
}
