import CourierTestSupport
import Foundation
import Testing

/// The agent's systemd unit installs as its comment says and passes `systemd-analyze verify`
/// (issue 31 item 8: `Documentation=man:courier(1)` failed it, as no page was installed).
@Suite("the agent's systemd unit (the built courier binary)")
struct SystemdUnitCLITests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../..").standardizedFileURL

    @Test("the unit's own install steps, in a fresh home, give a unit systemd-analyze verify accepts")
    func unitVerifies() throws {
        let analyze = "/usr/bin/systemd-analyze"
        guard FileManager.default.isExecutableFile(atPath: analyze), FileManager.default.isExecutableFile(atPath: "/usr/bin/man")
        else {
            print("SystemdUnitCLITests: skipped, systemd-analyze or man is not installed")
            return
        }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let home = directory.appending("home")
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        let unitFile = Self.repository.appendingPathComponent("Config/systemd/courier-agent.service")
        let unit = try String(contentsOf: unitFile, encoding: .utf8)
        // `systemctl reload` sends SIGHUP: the agent reloads its rate limits (docs/agent.md).
        #expect(unit.split(separator: "\n").contains("ExecReload=/bin/kill -HUP $MAINPID"))
        // The steps the unit's comment gives (`#   install …`), run as written from the
        // repository, the release binary being the one under test.
        let steps = unit.split(separator: "\n").map(String.init).filter { $0.hasPrefix("#   install ") }
            .map { String($0.dropFirst(4)).components(separatedBy: "   #")[0] }
        #expect(steps.count == 3, "\(steps)")
        #expect(steps.contains { $0.contains("docs/courier.1") }, "the page the unit names is installed too")
        for step in steps {
            let line = step.replacingOccurrences(of: ".build/release/courier", with: CourierBinary.url.path)
                .replacingOccurrences(of: "~/", with: home.path + "/")
            let result = try Shell.run("/bin/sh", ["-c", line], directory: Self.repository)
            #expect(result.status == 0, "\(line): \(result.stderr)")
        }
        let installed = home.appendingPathComponent(".config/systemd/user/courier-agent.service")
        #expect(FileManager.default.fileExists(atPath: installed.path))
        // As the user's login would: HOME, and ~/.local/bin on PATH (how man finds
        // ~/.local/share/man); no MANPATH.
        let verify = try Shell.run(
            "/usr/bin/env",
            ["-u", "MANPATH", "HOME=\(home.path)", "PATH=\(home.path)/.local/bin:/usr/local/bin:/usr/bin:/bin", analyze, "verify", installed.path])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        #expect(!verify.stderr.contains("man courier(1)"), "\(verify.stderr)")
    }
}
