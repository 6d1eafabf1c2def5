import CourierTestSupport
import Foundation
import Testing

/// The man page ships in the repository (`docs/courier.1`, issue 31 item 8): nobody needs the
/// toolchain and a debug build to read it. It is generated from the help (`scripts/man docs`), so
/// this test holds the two together: every command and every option the built binary describes
/// (`--experimental-dump-help`, what swift-argument-parser's generator reads) is on the page, under
/// its command, with its abstract, and the page names nothing the binary does not take.
@Suite("the shipped man page matches the help (the built courier binary)")
struct ManPageCLITests {
    static let page = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../../docs/courier.1").standardizedFileURL

    /// Command path ("courier content list") to the option names its entry lists.
    typealias Options = [String: Set<String>]

    /// What the binary says: every command's options and the abstracts it shows.
    private func helpTree() throws -> (options: Options, abstracts: [String]) {
        let result = try CourierBinary.run(["--experimental-dump-help"])
        #expect(result.status == 0, "\(result.stderr)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        var options: Options = [:]
        var abstracts: [String] = []
        func walk(_ command: [String: Any], path: [String]) {
            guard let name = command["commandName"] as? String else { return }
            let path = path + [name]
            if let abstract = command["abstract"] as? String, !abstract.isEmpty { abstracts.append(abstract) }
            var names: Set<String> = []
            for argument in command["arguments"] as? [[String: Any]] ?? [] {
                guard argument["shouldDisplay"] as? Bool != false, argument["kind"] as? String != "positional" else { continue }
                if let abstract = argument["abstract"] as? String, !abstract.isEmpty { abstracts.append(abstract) }
                for spelled in argument["names"] as? [[String: Any]] ?? [] {
                    guard let kind = spelled["kind"] as? String, let word = spelled["name"] as? String else { continue }
                    names.insert(kind == "long" ? "--" + word : "-" + word)
                }
            }
            options[path.joined(separator: " ")] = names
            for sub in command["subcommands"] as? [[String: Any]] ?? [] { walk(sub, path: path) }
        }
        walk(try #require(document["command"] as? [String: Any]), path: [])
        return (options, abstracts)
    }

    /// What the page says: each command's entry (`.It Em NAME` and its nested `.Bl` list) and the
    /// options (`.It Fl …`) listed in it.
    static func pageTree(_ text: String) -> Options {
        var options: Options = ["courier": []]
        var stack = ["courier"]
        var pending: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            let words = line.split(separator: " ").map(String.init)
            guard let macro = words.first else { continue }
            switch macro {
            case ".It" where words.count > 2 && words[1] == "Em":
                pending = (stack.last ?? "courier") + " " + words[2]
            case ".Bl":
                let path = pending ?? stack.last ?? "courier"
                stack.append(path)
                if options[path] == nil { options[path] = [] }
                pending = nil
            case ".El":
                if stack.count > 1 { stack.removeLast() }
            case ".It" where words.count > 2 && words[1] == "Fl":
                // `Fl h , -help` is "-h, --help": Fl marks every word up to the next macro.
                var names: Set<String> = []
                var flag = false
                for word in words.dropFirst() {
                    if word == "Fl" {
                        flag = true
                    } else if word.count == 2, word.first?.isUppercase == true {
                        flag = false
                    } else if flag, word != "," {
                        names.insert("-" + word)
                    }
                }
                options[stack.last ?? "courier", default: []].formUnion(names)
            default:
                break
            }
        }
        return options
    }

    @Test("every command and option of the help is on the shipped page, and nothing else")
    func pageMatchesHelp() throws {
        let text = try String(contentsOf: Self.page, encoding: .utf8)
        let (expected, abstracts) = try helpTree()
        let listed = Self.pageTree(text)
        // ArgumentParser's own flags: --help everywhere, --version at the top.
        let builtIn: Set<String> = ["-h", "--help", "--version"]
        for (command, names) in expected {
            let page = try #require(listed[command], "`\(command)` is not on docs/courier.1: run scripts/man docs")
            let missing = names.subtracting(page)
            #expect(missing.isEmpty, "`\(command)`: \(missing.sorted()) missing from docs/courier.1: run scripts/man docs")
        }
        for (command, names) in listed {
            let known = try #require(expected[command], "docs/courier.1 lists `\(command)`, which the binary lacks")
            let extra = names.subtracting(known).subtracting(builtIn)
            #expect(extra.isEmpty, "docs/courier.1 lists \(extra.sorted()) under `\(command)`: run scripts/man docs")
        }
        let flat = text.replacingOccurrences(of: "\\-", with: "-")
        let stale = abstracts.filter { !flat.contains($0) }
        #expect(stale.isEmpty, "help texts not on docs/courier.1 (run scripts/man docs): \(stale.prefix(3))")
        // The exit codes reach the last one of DESIGN.md.
        #expect(text.contains("8 the server refused the request"))
    }

    @Test("the page parser reads nested entries")
    func parserReadsNesting() {
        let text = """
            .Bl -tag -width 6n
            .It Fl -version
            .It Em content
            .Bl -tag -width 6n
            .It Em list
            .Bl -tag -width 6n
            .It Fl q , Fl -quiet
            .El
            .El
            .It Em get
            .Bl -tag -width 6n
            .It Fl o , -output Ar file
            .El
            .El
            """
        let tree = Self.pageTree(text)
        #expect(tree["courier"] == ["--version"])
        #expect(tree["courier content list"] == ["-q", "--quiet"])
        #expect(tree["courier get"]?.contains("-o") == true)
    }
}
