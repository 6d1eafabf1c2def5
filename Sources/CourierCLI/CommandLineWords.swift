import ArgumentParser
import Courier

/// The command line as typed, made into what ArgumentParser parses: global options given before
/// the subcommand (`courier -q list`, `courier --storage DIR content list`, as git and systemctl
/// take them) move behind it, and `courier help WORD…` names a command or is a usage error.
enum CommandLineWords {
    enum Outcome: Equatable {
        case arguments([String])
        case usageError(String)
    }

    /// Global flags (GlobalOptions) that take no value.
    static let flags: Set<String> = ["--json", "-q", "--quiet", "-v", "--verbose"]
    /// Global options (GlobalOptions) that take a value, as the next word or after `=`.
    static let valued: Set<String> = ["--storage", "--config"]

    static func normalized(_ words: [String]) -> Outcome {
        var command: any ParsableCommand.Type = CourierCommand.self
        var globals: [String] = []
        var path: [String] = []
        var index = 0
        // Walk the words that lead to a command with no subcommands: subcommand names and the
        // global options between them. Anything else ends the walk, and ArgumentParser judges
        // the rest as typed.
        while index < words.count, !command.configuration.subcommands.isEmpty {
            let word = words[index]
            if flags.contains(word) {
                globals.append(word)
                index += 1
            } else if valued.contains(word) {
                guard index + 1 < words.count else { return .usageError("courier: missing value for '\(word)'") }
                globals += [word, words[index + 1]]
                index += 2
            } else if valued.contains(where: { word.hasPrefix($0 + "=") }) {
                globals.append(word)
                index += 1
            } else if word == "help" && ObjectIdentifier(command) == ObjectIdentifier(CourierCommand.self) {
                return help(Array(words[(index + 1)...]), globals: globals)
            } else if let next = command.configuration.subcommands.first(where: { $0.configuration.commandName == word }) {
                command = next
                path.append(word)
                index += 1
            } else {
                break
            }
        }
        if globals.isEmpty { return .arguments(words) }
        if path.isEmpty {
            // No subcommand: `courier -q` alone, or `courier --json --version`. The root takes
            // none of these options; leave them for ArgumentParser's usual answer, except in front
            // of --version/--help, which need no store or output mode.
            let rest = Array(words[index...])
            if rest == ["--version"] || rest == ["-V"] || rest == ["--help"] || rest == ["-h"] { return .arguments(rest) }
            return .arguments(words)
        }
        return .arguments(path + globals + words[index...])
    }

    /// `courier help WORD…`: the help of the command the words name; a word that names none is a
    /// usage error (exit 2), with a "did you mean" when one is close.
    private static func help(_ words: [String], globals: [String]) -> Outcome {
        var command: any ParsableCommand.Type = CourierCommand.self
        var path: [String] = []
        for word in words {
            if word.hasPrefix("-") { continue }
            let subcommands = command.configuration.subcommands
            guard let next = subcommands.first(where: { $0.configuration.commandName == word }) else {
                let names = subcommands.compactMap { $0.configuration.commandName }
                let scope = path.isEmpty ? "" : " under '\(path.joined(separator: " "))'"
                var message = "courier: no command '\(word)'\(scope); `courier help` lists them"
                if let close = Spelling.suggestion(for: word, among: names) { message += "\nDid you mean '\(close)'?" }
                return .usageError(message)
            }
            command = next
            path.append(word)
        }
        return .arguments(["help"] + path)
    }
}
