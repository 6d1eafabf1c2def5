import Foundation
import Testing

@testable import Courier

/// Entry names and link targets are read as the kernel reads a path: by bytes. To `String`, a
/// `/` followed by a combining mark is one `Character` that is not `/`, so a check by characters
/// let `"../\u{301}x"` climb out of the package and `"/\u{301}x"` write at the file system's root.
@Suite("Entry rules read paths by bytes")
struct EntryRulesTests {
    static let combining = "\u{301}"

    /// What the kernel makes of a relative path below a folder `depth` levels inside the package
    /// (`openat`, no links): the folders and name it ends at, or nil when it is absolute or climbs
    /// above the package root.
    static func resolve(_ path: String, from start: [String] = []) -> [String]? {
        let bytes = Array(path.utf8)
        if bytes.first == UInt8(ascii: "/") { return nil }
        var position = start
        for segment in bytes.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true) {
            switch Array(segment) {
            case [0x2E]: continue
            case [0x2E, 0x2E]:
                if position.isEmpty { return nil }
                position.removeLast()
            default: position.append(String(decoding: segment, as: UTF8.self))
            }
        }
        return position
    }

    @Test("a slash with a combining mark still separates, climbs and roots a name")
    func combiningSlash() throws {
        for name in ["../\(Self.combining)evil.txt", "Contents/../../\(Self.combining)x", "/\(Self.combining)evil.txt",
                     "/\(Self.combining)/../etc/x", "a/\(Self.combining)/../../\(Self.combining)b"] {
            #expect(throws: CourierError.self, "\(Array(name.utf8))") { try EntryRules.components(of: name, maxDepth: 32) }
        }
        // A name may start with a combining mark: one component, as the kernel sees it.
        #expect(try EntryRules.components(of: "a/\(Self.combining)b", maxDepth: 32) == ["a", "\(Self.combining)b"])
        #expect(try EntryRules.components(of: "./a//b/.", maxDepth: 32) == ["a", "b"])
    }

    /// Every name built from slashes, dots, combining marks and letters: accepted only if the
    /// kernel resolves it inside the package, and then into exactly the components returned.
    @Test("names accepted are the kernel's own components, never outside")
    func namesMatchTheKernel() throws {
        let alphabet = ["/", ".", "..", Self.combining, "a", "\u{E9}", "e\u{301}", "\u{20DD}"]
        var generator = SystemRandomNumberGenerator()
        var accepted = 0
        var refused = 0
        for _ in 0..<20_000 {
            let name = (0..<Int.random(in: 1...7, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }
                .joined()
            let kernel = Self.resolve(name)
            let climbs = name.utf8.split(separator: UInt8(ascii: "/")).contains { Array($0) == [0x2E, 0x2E] }
            do {
                let components = try EntryRules.components(of: name, maxDepth: 32)
                accepted += 1
                #expect(kernel == components, "\(Array(name.utf8))")
                #expect(!climbs, "\(Array(name.utf8))")
                #expect(components.allSatisfy { !$0.utf8.contains(UInt8(ascii: "/")) }, "\(Array(name.utf8))")
            } catch {
                refused += 1
                // Refused: absolute, or holding a `..` (refused even when it stays inside).
                #expect(kernel == nil || climbs, "\(Array(name.utf8)) refused: \(error)")
            }
        }
        #expect(accepted > 1000 && refused > 1000)
    }

    @Test("a link target with a combining slash is read as the kernel resolves it")
    func linkTargets() {
        let link = ["Contents", "link"]
        #expect(!EntryRules.symlinkTargetStaysInside(link: link, target: "/\(Self.combining)/../etc", links: []))
        #expect(!EntryRules.symlinkTargetStaysInside(link: link, target: "../../\(Self.combining)x", links: []))
        #expect(!EntryRules.symlinkTargetStaysInside(link: ["link"], target: "../\(Self.combining)", links: []))
        #expect(EntryRules.symlinkTargetStaysInside(link: link, target: "../\(Self.combining)x", links: []))
        let alphabet = ["/", ".", "..", Self.combining, "a", "e\u{301}"]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let target = (0..<Int.random(in: 1...7, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }
                .joined()
            if EntryRules.symlinkTargetStaysInside(link: link, target: target, links: []) {
                let resolved = Self.resolve(target, from: ["Contents"])
                #expect(resolved != nil && resolved != link, "\(Array(target.utf8))")
            }
        }
    }

    @Test("identifiers compare by their scalars, not by canonical equivalence")
    func identifiersCompareByScalars() {
        #expect("\u{212A}" == "K")  // what String's == does
        #expect(!"com.example.pac\u{212A}".isIdentical(to: "com.example.pacK"))
        #expect(!"caf\u{E9}".isIdentical(to: "cafe\u{301}"))
        #expect("com.example.pack".isIdentical(to: "com.example.pack"))
        #expect(throws: CourierError.self) {
            try ContentInfo(productId: "com.example.pac\u{212A}", version: "1.0").check(expectedProductId: "com.example.pacK", expectedVersion: nil)
        }
        #expect(throws: CourierError.self) {
            try ContentInfo(productId: "p", version: "1.0\u{37E}").check(expectedProductId: "p", expectedVersion: "1.0;")
        }
    }

    @Test("download file names and content identifiers hold no slash byte")
    func namesWithCombiningSlash() {
        #expect(throws: CourierError.self) { try DownloadFileName.check("a/\(Self.combining)b") }
        #expect(throws: CourierError.self) { try DownloadFileName.check("/\(Self.combining)etc") }
        #expect(throws: CourierError.self) { try ContentPlacer.checkIdentifier("a/\(Self.combining)..") }
        #expect(throws: CourierError.self) { try ContentPlacer.checkIdentifier("a\\\(Self.combining)b") }
        #expect(throws: CourierError.self) { try ContentPlacer.checkIdentifier(".\(Self.combining)hidden") }
        #expect((try? DownloadFileName.check("\(Self.combining)a.zip")) == "\(Self.combining)a.zip")
    }
}
