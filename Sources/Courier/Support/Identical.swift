extension StringProtocol {
    /// Whether the two hold the same Unicode scalars (the same UTF-8 bytes): how StoreKit and the
    /// file system compare product identifiers, versions and names. `==` on `String` compares by
    /// canonical equivalence, under which distinct identifiers are equal: `"\u{212A}"` (KELVIN
    /// SIGN) `== "K"`, `"\u{37E}" == ";"`, `"caf\u{E9}" == "cafe\u{301}"`.
    func isIdentical(to other: some StringProtocol) -> Bool {
        utf8.elementsEqual(other.utf8)
    }
}
