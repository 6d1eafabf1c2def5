import CourierTestSupport
import Foundation
import Testing

/// Shell completion and the man page (issue 14, item 11): the completion scripts generate and
/// load, and the help dump that `scripts/man` turns into courier.1 lists every subcommand.
@Suite("shell completion and the man page's source (the built courier binary)")
struct ShellIntegrationCLITests {
    private let subcommands = ["deliver", "enqueue", "get", "list", "status", "resume", "cancel", "agent"]

    @Test("--generate-completion-script writes a script for bash, zsh and fish naming the subcommands", arguments: ["bash", "zsh", "fish"])
    func completionScript(shell: String) throws {
        let result = try CourierBinary.run(["--generate-completion-script", shell])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.isEmpty, "\(result.stderr)")
        for name in subcommands { #expect(result.stdout.contains(name), "\(shell): no \(name)") }
        switch shell {
        case "bash": #expect(result.stdout.contains("complete -"), "\(result.stdout.prefix(300))")
        case "zsh": #expect(result.stdout.hasPrefix("#compdef courier"), "\(result.stdout.prefix(300))")
        default: #expect(result.stdout.contains("complete -c 'courier'"), "\(result.stdout.prefix(300))")
        }
    }

    @Test("the bash script loads in bash and registers courier's completion")
    func bashLoads() throws {
        guard FileManager.default.isExecutableFile(atPath: "/bin/bash") else { return }
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let script = folder.appending("courier.bash")
        let generated = try CourierBinary.run(["--generate-completion-script", "bash"])
        try Data(generated.stdout.utf8).write(to: script)
        let result = try CourierBinary.runShell("/bin/bash -c 'source \"\(script.path)\" && complete -p courier'")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("courier"), "\(result.stdout)")
    }

    @Test("the help dump generate-manual reads (scripts/man) parses and holds every subcommand")
    func helpDump() throws {
        let result = try CourierBinary.run(["--experimental-dump-help"])
        #expect(result.status == 0, "\(result.stderr)")
        let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        let command = object?["command"] as? [String: Any]
        #expect(command?["commandName"] as? String == "courier")
        let names = ((command?["subcommands"] as? [[String: Any]]) ?? []).compactMap { $0["commandName"] as? String }
        for name in subcommands { #expect(names.contains(name), "\(names)") }
    }
}
