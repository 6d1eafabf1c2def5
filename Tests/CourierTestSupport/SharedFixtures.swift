import Foundation

/// Test data made by others (Apple's receipt vectors, public hostile archives): `../shared/NAME`
/// beside the clone when it exists, else the copy committed in `Tests/Fixtures/shared/NAME`
/// (Tests/Fixtures/README.md), so a clone alone runs every test.
public enum SharedFixtures {
    public static func folder(_ name: String) -> URL {
        let root = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent()  // CourierTestSupport
            .deletingLastPathComponent()  // Tests
            .deletingLastPathComponent()  // package root
        let beside = root.deletingLastPathComponent()
            .appendingPathComponent("shared", isDirectory: true)
            .appendingPathComponent(name, isDirectory: true)
        var isFolder: ObjCBool = false
        if FileManager.default.fileExists(atPath: beside.path, isDirectory: &isFolder), isFolder.boolValue {
            return beside.standardizedFileURL
        }
        return root.appendingPathComponent("Tests/Fixtures/shared", isDirectory: true)
            .appendingPathComponent(name, isDirectory: true)
    }
}
